/*
 * vfork through the preload library: the child execs (or _exits) on the parent's
 * stack, and the parent resumes with its frame intact. Built by build.rs; run by
 * tests/passthrough.rs with LD_PRELOAD set. Prints "vfork ok" and exits 0 when every
 * check holds, and whether the library is loaded.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int status_of(pid_t pid)
{
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

int main(void)
{
	volatile int canary = 0x5eed;
	for (int round = 0; round < 3; round++) {
		pid_t pid = vfork();
		if (pid == 0) {
			execl("/bin/sh", "sh", "-c", "exit 7", (char *)NULL);
			_exit(127);
		}
		if (pid < 0 || status_of(pid) != 7) {
			printf("vfork+exec failed in round %d\n", round);
			return 1;
		}
		pid = vfork();
		if (pid == 0)
			_exit(9);
		if (pid < 0 || status_of(pid) != 9) {
			printf("vfork+_exit failed in round %d\n", round);
			return 1;
		}
	}
	if (canary != 0x5eed) {
		printf("stack frame clobbered\n");
		return 1;
	}
	FILE *m = fopen("/proc/self/maps", "r");
	char line[4096];
	int loaded = 0;
	while (m && fgets(line, sizeof line, m))
		if (strstr(line, "libember_preload.so"))
			loaded = 1;
	printf("vfork ok, library %s\n", loaded ? "loaded" : "absent");
	return 0;
}
