/* Files embedded at build time (tools/embed.c). Each array has a trailing
 * NUL that is not counted in its _len, so text can be used as a string. */
#ifndef MOAT_CORE_EMBEDDED_H
#define MOAT_CORE_EMBEDDED_H

extern const unsigned char moat_embedded_default_policy[];
extern const unsigned long moat_embedded_default_policy_len;
extern const unsigned char moat_embedded_zygote_policy[];
extern const unsigned long moat_embedded_zygote_policy_len;
extern const unsigned char moat_embedded_rootfs_plan[];
extern const unsigned long moat_embedded_rootfs_plan_len;

#endif
