/*
 * The entry points that C declares variadic, which stable Rust cannot define: fcntl,
 * fcntl64, ioctl, syscall and execl, execlp, execle. Each collects its arguments and
 * calls the library's Rust body (ember_fcntl, ..., ember_syscall) or its exec.
 *
 * And vfork, which cannot be a function that calls the C library's vfork: the child
 * would return from the wrapper, and reuse the stack frame the parent later returns
 * through. So vfork is a few instructions that *jump* to the C library's vfork (the
 * caller's return address untouched, as if it had called it directly), unless the
 * library needs the child to go through its fork handling, or the real vfork was not
 * resolved yet; then it jumps to ember_vfork_as_fork (fork, parent waits for exec or
 * exit).
 *
 * No system headers declare these functions here, so no header's redirection (the
 * _FILE_OFFSET_BITS or _TIME_BITS ones, to fcntl64 say) changes which symbol this
 * file defines.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>

extern int ember_fcntl(int fd, int cmd, unsigned long arg);
extern int ember_fcntl64(int fd, int cmd, unsigned long arg);
extern int ember_ioctl(int fd, unsigned long req, void *arg);
extern long ember_syscall(long n, long a, long b, long c, long d, long e, long f);
extern int execv(const char *path, char *const argv[]);
extern int execvp(const char *file, char *const argv[]);
extern int execve(const char *path, char *const argv[], char *const envp[]);

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	/* glibc reads the third argument the same way, whatever the command. */
	unsigned long arg = va_arg(ap, unsigned long);
	va_end(ap);
	return ember_fcntl(fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	unsigned long arg = va_arg(ap, unsigned long);
	va_end(ap);
	return ember_fcntl64(fd, cmd, arg);
}

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	return ember_ioctl(fd, req, arg);
}

long syscall(long n, ...)
{
	va_list ap;
	va_start(ap, n);
	long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
	long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
	va_end(ap);
	return ember_syscall(n, a, b, c, d, e, f);
}

/* The number of arguments after `first` up to the terminating NULL, plus one for
 * `first` and one for the NULL (as glibc's execl counts them). */
#define COUNT_ARGS(first, last_named, n)                  \
	do {                                              \
		va_list cp;                               \
		va_start(cp, last_named);                 \
		n = 2;                                    \
		while (va_arg(cp, const char *) != NULL)  \
			n++;                              \
		va_end(cp);                               \
	} while (0)

int execl(const char *path, const char *arg, ...)
{
	size_t n;
	COUNT_ARGS(arg, arg, n);
	const char *argv[n];
	va_list ap;
	va_start(ap, arg);
	argv[0] = arg;
	for (size_t i = 1; i < n; i++)
		argv[i] = va_arg(ap, const char *);
	va_end(ap);
	return execv(path, (char *const *)argv);
}

int execlp(const char *file, const char *arg, ...)
{
	size_t n;
	COUNT_ARGS(arg, arg, n);
	const char *argv[n];
	va_list ap;
	va_start(ap, arg);
	argv[0] = arg;
	for (size_t i = 1; i < n; i++)
		argv[i] = va_arg(ap, const char *);
	va_end(ap);
	return execvp(file, (char *const *)argv);
}

int execle(const char *path, const char *arg, ...)
{
	size_t n;
	COUNT_ARGS(arg, arg, n);
	const char *argv[n];
	va_list ap;
	va_start(ap, arg);
	argv[0] = arg;
	for (size_t i = 1; i < n; i++)
		argv[i] = va_arg(ap, const char *);
	char *const *envp = va_arg(ap, char *const *);
	va_end(ap);
	return execve(path, (char *const *)argv, envp);
}

/* vfork's target: the C library's vfork (resolved by the constructor below), or
 * ember_vfork_as_fork while ember_vfork_needs_fork is set. */
__attribute__((visibility("hidden"))) void *ember_real_vfork;
__attribute__((visibility("hidden"))) int ember_vfork_needs_fork;

__attribute__((constructor)) static void ember_resolve_vfork(void)
{
	ember_real_vfork = dlsym(RTLD_NEXT, "vfork");
}

#if defined(__x86_64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork,@function\n"
	"vfork:\n"
	"	cmpl $0, ember_vfork_needs_fork(%rip)\n"
	"	jne 1f\n"
	"	movq ember_real_vfork(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	je 1f\n"
	"	jmp *%rax\n"
	"1:	jmp ember_vfork_as_fork@PLT\n"
	".size vfork, .-vfork\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork,%function\n"
	"vfork:\n"
	"	adrp x16, ember_vfork_needs_fork\n"
	"	ldr w16, [x16, :lo12:ember_vfork_needs_fork]\n"
	"	cbnz w16, 1f\n"
	"	adrp x16, ember_real_vfork\n"
	"	ldr x16, [x16, :lo12:ember_real_vfork]\n"
	"	cbz x16, 1f\n"
	"	br x16\n"
	"1:	b ember_vfork_as_fork\n"
	".size vfork, .-vfork\n");
#else
extern int ember_vfork_as_fork(void);
int vfork(void)
{
	return ember_vfork_as_fork();
}
#endif
