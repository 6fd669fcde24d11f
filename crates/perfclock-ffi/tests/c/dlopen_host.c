/* Loads the plugin named by argv[1] with dlopen() and reports what its constructor's
 * perfclock_init() returned, how long dlopen() took, and what a second perfclock_init() after
 * dlopen() returns. Dies of SIGALRM if anything hangs. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static long long elapsed_ms(const struct timespec *from)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - from->tv_sec) * 1000LL + (now.tv_nsec - from->tv_nsec) / 1000000;
}

int main(int argc, char **argv)
{
	struct timespec start;
	void *plugin;
	int *constructor_result;
	int (*init)(void);
	int (*mode)(void);

	if (argc != 2) {
		fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
		return 2;
	}
	alarm(60);
	clock_gettime(CLOCK_MONOTONIC, &start);
	plugin = dlopen(argv[1], RTLD_NOW);
	if (plugin == NULL) {
		printf("DLOPEN-FAILED %s\n", dlerror());
		return 3;
	}
	printf("DLOPEN-MS %lld\n", elapsed_ms(&start));
	constructor_result = (int *)dlsym(plugin, "plugin_init_result");
	*(void **)(&init) = dlsym(plugin, "perfclock_init");
	*(void **)(&mode) = dlsym(plugin, "perfclock_mode");
	if (constructor_result == NULL || init == NULL || mode == NULL) {
		printf("DLSYM-FAILED %s\n", dlerror());
		return 4;
	}
	printf("CONSTRUCTOR-INIT %d\n", *constructor_result);
	clock_gettime(CLOCK_MONOTONIC, &start);
	printf("INIT-AFTER-DLOPEN %d\n", init());
	printf("INIT-AFTER-DLOPEN-MS %lld\n", elapsed_ms(&start));
	printf("MODE %d\n", mode());
	fflush(stdout);
	return 0;
}
