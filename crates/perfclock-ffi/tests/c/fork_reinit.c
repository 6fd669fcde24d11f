/* A pre-fork server's worker: the parent opens the clock, a fork child keeps running. In
 * calibrated mode the child has no refinement thread: past the longest refinement pause its
 * bound must be UINT64_MAX, and perfclock_init() in the child must start refinement again
 * (a finite bound, readings that do not go back). Prints KEY VALUE lines; dies of SIGALRM if
 * anything hangs. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "perfclock.h"

int main(void)
{
	/* Past the default longest refinement pause (1 s). */
	const struct timespec past_pause = { 1, 500000000 };
	int rc, status;
	pid_t pid;

	alarm(60);
	rc = perfclock_init();
	printf("PARENT-INIT %d\nMODE %d\n", rc, perfclock_mode());
	fflush(stdout);
	if (rc != PERFCLOCK_OK)
		return 2;
	if (perfclock_mode() != PERFCLOCK_MODE_CALIBRATED)
		return 0;
	pid = fork();
	if (pid < 0)
		return 3;
	if (pid == 0) {
		uint64_t frozen, resumed, before, after;

		nanosleep(&past_pause, NULL);
		frozen = perfclock_error_bound_ns();
		before = perfclock_now_ns();
		rc = perfclock_init();
		after = perfclock_now_ns();
		resumed = perfclock_error_bound_ns();
		printf("CHILD-BOUND-FROZEN %" PRIu64 "\nCHILD-INIT %d\nCHILD-BOUND-RESUMED %" PRIu64
		       "\nCHILD-WENT-BACK %d\n",
		       frozen, rc, resumed, after < before);
		fflush(stdout);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return 4;
	return 0;
}
