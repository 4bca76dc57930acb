/*
 * cmd_top.c: `zephon top MOUNTPOINT`: a view of a live mount for people, redrawn once a
 * second as top(1) does: the job's consumed_samples, step, epoch progress and ETA, read
 * rates, the last error, then each served rank and each source of a mixture.
 *
 * It reads the mount's /status (JSON) and nothing else, so it works over any mount the
 * user can read, claims nothing and never slows the trainers beyond one small read a
 * second. Written in C beside the other subcommands so that `zephon top` is one command
 * wherever `zephon` is, with no Python needed on the node.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cmd.h"

static volatile sig_atomic_t stop_now;

static void on_signal(int sig)
{
	(void)sig;
	stop_now = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zephon top MOUNTPOINT [--once] [--interval SECONDS]\n"
		"\n"
		"A live view of a mount, redrawn every second until Ctrl-C:\n"
		"consumed_samples and what counts it (claims of next, or reads of the pure files\n"
		"from/, at/, step/), the step, the epoch's progress and its ETA at the current\n"
		"rate, samples/s and tokens/s, seconds since the last read, the last error; then\n"
		"per served rank its step, consumed_samples, samples read and rates; and per\n"
		"source of a mixture its weight, consumed_samples, epoch, progress and ETA.\n"
		"Rates are the mount's, over its last 10 s. It reads MOUNTPOINT/status only.\n"
		"\n"
		"  --once            print one frame and exit (no terminal codes; for scripts)\n"
		"  --interval S      seconds between frames (default 1; 0.1 to 3600)\n"
		"\n"
		"When standard output is not a terminal, frames follow one another without\n"
		"clearing the screen. Exit status: 0 (--once, or ended by Ctrl-C / SIGTERM),\n"
		"1 (MOUNTPOINT is not a zephon mount, or it went away: the message says which),\n"
		"2 (usage).\n");
}

static uint64_t jget_u64(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_integer(v) && json_integer_value(v) > 0 ?
	       (uint64_t)json_integer_value(v) : 0;
}

/* The number at key, or NAN when it is null or absent. */
static double jget_num(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *jget_str(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

/* "1h02m", "3m05s", "42s" or "-" (no rate, or no end in sight). */
static const char *eta_text(double samples, double per_s, char *buf, size_t len)
{
	double s;

	if (!(per_s > 0) || !(samples >= 0) || samples / per_s > 1e8) {
		snprintf(buf, len, "-");
		return buf;
	}
	s = samples / per_s;
	if (s >= 3600)
		snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
	else if (s >= 60)
		snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
	else
		snprintf(buf, len, "%ds", (int)ceil(s));
	return buf;
}

/* A number or "-" when null. */
static const char *num_text(double v, int decimals, char *buf, size_t len)
{
	if (isnan(v))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.*f", decimals, v);
	return buf;
}

/* One frame from a parsed /status into f. */
static void frame(FILE *f, const char *mnt, const json_t *st)
{
	const json_t *p = json_object_get(st, "progress"), *mix = json_object_get(st, "mixture");
	const json_t *err = json_object_get(st, "last_error"), *ranks, *v;
	const char *key;
	uint64_t consumed = jget_u64(st, "consumed_samples"), b = jget_u64(st, "global_batch");
	uint64_t n = jget_u64(p, "epoch_samples");
	double rate = jget_num(p, "samples_per_s");
	char t1[32], t2[32], t3[32], now[16];
	time_t t = time(NULL);

	strftime(now, sizeof(now), "%H:%M:%S", localtime(&t));
	fprintf(f, "zephon top %s  %s  %s\n", mnt, jget_str(st, "dataset"), now);
	fprintf(f, "world_size %" PRIu64 "  global_batch %" PRIu64 "  micro_batch %" PRIu64
		"  ranks %s  seed %" PRIu64 "  resume %s\n", jget_u64(st, "world_size"), b,
		jget_u64(st, "micro_batch"), jget_str(st, "ranks"), jget_u64(st, "seed"),
		jget_str(st, "resume"));
	fprintf(f, "consumed_samples %" PRIu64 " (%s)  ", consumed,
		jget_str(p, "consumed_samples_from"));
	if (json_is_integer(json_object_get(st, "consumed_step")))
		fprintf(f, "step %" PRIu64 "  ", jget_u64(st, "consumed_step"));
	fprintf(f, "epoch %" PRIu64, jget_u64(st, "epoch"));
	if (n && !json_is_object(mix))
		fprintf(f, "  %.1f%% of %" PRIu64 "  ETA %s", 100.0 * (double)(consumed % n) /
			(double)n, n, eta_text((double)(n - consumed % n), rate, t1, sizeof(t1)));
	fprintf(f, "\nsamples/s %s  tokens/s %s  last read %s s ago  claims %" PRIu64 "\n",
		num_text(rate, 1, t1, sizeof(t1)),
		num_text(jget_num(p, "tokens_per_s"), 0, t2, sizeof(t2)),
		num_text(jget_num(p, "seconds_since_read"), 1, t3, sizeof(t3)),
		jget_u64(json_object_get(st, "counters"), "claims"));
	if (json_is_object(err)) {
		time_t et = (time_t)jget_u64(err, "time");
		char when[16];

		strftime(when, sizeof(when), "%H:%M:%S", localtime(&et));
		fprintf(f, "last error %s: %s\n", when, jget_str(err, "message"));
	} else {
		fprintf(f, "last error: none\n");
	}
	fprintf(f, "\n%-6s %10s %18s %12s %11s %12s %10s\n", "rank", "step",
		"consumed_samples", "samples", "samples/s", "tokens/s", "read s ago");
	ranks = json_object_get(p, "ranks");
	json_object_foreach((json_t *)ranks, key, v) {
		char a[32], c[32], d[32], e[32], g[32];

		fprintf(f, "%-6s %10s %18s %12" PRIu64 " %11s %12s %10s\n", key,
			num_text(jget_num(v, "step"), 0, a, sizeof(a)),
			num_text(jget_num(v, "consumed_samples"), 0, c, sizeof(c)),
			jget_u64(v, "samples"),
			num_text(jget_num(v, "samples_per_s"), 1, d, sizeof(d)),
			num_text(jget_num(v, "tokens_per_s"), 0, e, sizeof(e)),
			num_text(jget_num(v, "seconds_since_read"), 1, g, sizeof(g)));
	}
	if (json_is_object(mix)) {
		const json_t *srcs = json_object_get(mix, "sources");
		double wsum = 0;
		size_t i;

		json_array_foreach(srcs, i, v)
			wsum += (double)jget_u64(v, "weight");
		fprintf(f, "\n%-16s %7s %18s %6s %9s %11s %9s\n", "source", "weight",
			"consumed_samples", "epoch", "progress", "samples/s", "ETA");
		json_array_foreach(srcs, i, v) {
			uint64_t used = jget_u64(v, "consumed_samples"), sn = jget_u64(v, "epoch_samples");
			double srate = wsum > 0 ? rate * (double)jget_u64(v, "weight") / wsum : NAN;
			char a[32], c[32];

			fprintf(f, "%-16s %7" PRIu64 " %18" PRIu64 " %6" PRIu64 " %8.1f%% %11s %9s\n",
				jget_str(v, "name"), jget_u64(v, "weight"), used,
				jget_u64(v, "epoch"), sn ? 100.0 * (double)(used % sn) / (double)sn : 0,
				num_text(srate, 1, a, sizeof(a)),
				sn ? eta_text((double)(sn - used % sn), srate, c, sizeof(c)) : "-");
		}
	}
}

/* /status of mnt, parsed: 0, or -errno of the read (ENOENT/ENOTCONN: no mount there, or
 * its daemon died), -EBADMSG (not a zephon /status). */
static int load_status(const char *mnt, json_t **out, char *why, size_t why_len)
{
	char path[4096];
	json_error_t e;
	FILE *f;

	snprintf(path, sizeof(path), "%s/status", mnt);
	f = fopen(path, "rb");
	if (!f) {
		int rc = -errno;

		snprintf(why, why_len, "cannot read %s: %s", path, strerror(-rc));
		return rc;
	}
	*out = json_loadf(f, 0, &e);
	fclose(f);
	if (!*out || !json_is_object(json_object_get(*out, "progress"))) {
		snprintf(why, why_len, "%s is not the status of a zephon mount of this version%s%s",
			 path, *out ? "" : ": ", *out ? "" : e.text);
		json_decref(*out);
		return -EBADMSG;
	}
	return 0;
}

/* SIGINT, SIGTERM and SIGHUP set stop_now; no SA_RESTART, so that a sleep ends at once. */
static void catch_stop_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

/* Sleep for seconds (>= 0), or until a stop signal. */
static void sleep_s(double seconds)
{
	struct timespec ts;

	ts.tv_sec = (time_t)seconds;
	ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
	while (!stop_now && nanosleep(&ts, &ts) && errno == EINTR)
		;
}

int cmd_top(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "once", no_argument, NULL, 'o' },
		{ "interval", required_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	double interval = 1;
	int once = 0, c, tty, frames = 0, rc = 0;
	const char *mnt;

	while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		char *end;

		switch (c) {
		case 'o':
			once = 1;
			break;
		case 'i':
			interval = strtod(optarg, &end);
			if (*end || !(interval >= 0.1 && interval <= 3600)) {
				die_msg("--interval %s: give seconds from 0.1 to 3600", optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	mnt = argv[optind];
	tty = !once && isatty(STDOUT_FILENO);
	catch_stop_signals();
	if (tty)
		fputs("\x1b[?25l", stdout); /* hide the cursor while drawing */
	while (!stop_now) {
		char why[4600];
		json_t *st = NULL;
		int lrc = load_status(mnt, &st, why, sizeof(why));

		if (lrc) {
			if (frames)
				die_msg("%s went away (%s); the mount was unmounted or its daemon "
					"ended", mnt, why);
			else
				die_msg("%s is not a zephon mount (%s)", mnt, why);
			rc = 1;
			break;
		}
		if (tty)
			fputs("\x1b[H\x1b[2J", stdout); /* home, clear */
		else if (frames)
			fputs("\n", stdout);
		frame(stdout, mnt, st);
		json_decref(st);
		fflush(stdout);
		frames++;
		if (once)
			break;
		sleep_s(interval);
	}
	if (tty)
		fputs("\x1b[?25h", stdout); /* the cursor back */
	fflush(stdout);
	return rc;
}
