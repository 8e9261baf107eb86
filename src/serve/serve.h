/* serve: `moat serve`, the HTTP service (docs/SERVE.md). Its public face is
 * in moat_admin.h (struct moat_serve_options, moat_serve_run). */
#ifndef MOAT_SERVE_SERVE_H
#define MOAT_SERVE_SERVE_H

#include "moat_admin.h"

#endif
