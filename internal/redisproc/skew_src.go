package redisproc

// skewSrc is the LD_PRELOAD library BuildSkewClock builds.
const skewSrc = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The offset in ms, read from the file named by SKEW_FILE (a signed
   integer), again at most every 10 ms. Raw syscalls only: no libc call
   that could allocate (Redis's jemalloc reads the clock). */
static long long skew_ms, skew_read_at = -1000000000LL;

static long long raw_ms(clockid_t id) {
	struct timespec ts;
	syscall(SYS_clock_gettime, id, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long long skew(void) {
	long long m = raw_ms(CLOCK_MONOTONIC);
	if (m - skew_read_at < 10) return skew_ms;
	skew_read_at = m;
	const char *f = getenv("SKEW_FILE");
	if (!f) return skew_ms;
	int fd = (int)syscall(SYS_open, f, O_RDONLY);
	if (fd < 0) return skew_ms;
	char buf[32];
	long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
	syscall(SYS_close, fd);
	if (n <= 0) return skew_ms;
	buf[n] = 0;
	long long v = 0; int neg = 0; int i = 0;
	if (buf[0] == '-') { neg = 1; i = 1; } else if (buf[0] == '+') i = 1;
	for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) v = v * 10 + (buf[i] - '0');
	skew_ms = neg ? -v : v;
	return skew_ms;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	long r = syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + skew() * 1000000LL;
		ts->tv_sec = ns / 1000000000LL; ts->tv_nsec = ns % 1000000000LL;
	}
	return (int)r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
	(void)tz;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) *t = ts.tv_sec;
	return ts.tv_sec;
}
`
