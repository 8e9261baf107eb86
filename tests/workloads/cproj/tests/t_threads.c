/* threads, a condition variable, a timed sleep */
#define _GNU_SOURCE
#include "wl.h"
#include <pthread.h>
#include <time.h>
const char *wl_prog = "t_threads";
int wl_failed;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int total, done;

static void *work(void *arg)
{
	int n = *(int *)arg;
	pthread_mutex_lock(&mu);
	total += n;
	done++;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	return NULL;
}

int main(void)
{
	pthread_t t[8];
	int args[8];
	for (int i = 0; i < 8; i++) {
		args[i] = i + 1;
		pthread_create(&t[i], NULL, work, &args[i]);
	}
	pthread_mutex_lock(&mu);
	while (done < 8)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	for (int i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	WL_CHECK("sum", total == 36);
	struct timespec ts = {0, 1000000};
	WL_CHECK("clock_nanosleep", clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL) == 0);
	return wl_failed;
}
