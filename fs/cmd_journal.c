/*
 * cmd_journal.c: `zephon journal show PATH [--json]` (the history of a cursor journal) and
 * `zephon journal resume-point PATH... [--json]` (the samples:G@S that resume=auto would
 * use, over one journal or the journals of every node of a job). Read-only: both open
 * journals with journal_open_readonly() and never write to them.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cmd.h"
#include "journal.h"
#include "layout_json.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zephon journal show PATH [--json]\n"
		"       zephon journal resume-point PATH... [--json]\n"
		"\n"
		"A cursor journal (journal=PATH of a mount) records every layout a dataset was\n"
		"mounted with, the cursor of every served rank, checkpoint marks and rewinds.\n"
		"\n"
		"  show          print the history: layouts (W, B, m, ranks, start step and\n"
		"                samples, time, host, resume rule, a mixture's weights),\n"
		"                cursors, checkpoint marks, rewinds, consumed_samples and the\n"
		"                resume point.\n"
		"  resume-point  print where resume=auto would start, as samples:G@S (gsn G,\n"
		"                numbered step S). With the journals of several nodes (one per\n"
		"                node), the latest checkpoint mark in any of them wins, else the\n"
		"                minimum over every rank of the last layout; pass\n"
		"                -o resume=samples:G@S to every node.\n"
		"\n"
		"options:\n"
		"  --json        one JSON object instead of text\n"
		"  -h, --help    this help\n"
		"\n"
		"Both only read the journals (a journal held by a running mount is refused: read\n"
		"the mount's /status instead). Exit status: 0, 1 when a journal cannot be read\n"
		"(missing, corrupt, not a Zephon journal), 2 on a usage error.\n");
}

static const struct option long_opts[] = {
	{ "json", no_argument, NULL, 'j' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* Parse the options after the verb; returns -1 to go on, else an exit status. */
static int parse_opts(int argc, char **argv, int *json)
{
	int c;

	*json = 0;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			*json = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			die_msg("journal %s: unknown option '%s'; see zephon journal --help", argv[0],
				argv[optind - 1]);
			return 2;
		}
	}
	return -1;
}

static const char *utc(int64_t unix_s, char *buf, size_t len)
{
	time_t t = (time_t)unix_s;
	struct tm tm;

	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%" PRId64, unix_s);
	return buf;
}

/* consumed_samples of a layout from its recorded cursors: the slowest rank's delivered
 * steps (G0 with no cursor). */
static uint64_t consumed_of(const struct layout *l, const struct journal_cursor *cs, size_t n)
{
	uint64_t slowest = n ? UINT64_MAX : layout_start_step(l);

	for (size_t i = 0; i < n; i++)
		slowest = cs[i].delivered_step < slowest ? cs[i].delivered_step : slowest;
	return layout_consumed_at(l, slowest, NULL);
}

/* A cursor's position, or its delivered position. */
static uint64_t pos_step(const struct journal_cursor *c, int delivered)
{
	return delivered ? c->delivered_step : c->step;
}

static uint64_t pos_micro(const struct journal_cursor *c, int delivered)
{
	return delivered ? c->delivered_micro : c->micro;
}

/* "ranks 0-3 at 5.0, rank 4 at 4.1": runs of consecutive ranks at one position (the
 * cursors, or with `delivered` the delivered positions). */
static void print_cursors(const struct journal_cursor *cs, size_t n, const char *indent,
			  int delivered)
{
	size_t col = 0;

	for (size_t i = 0; i < n;) {
		size_t k = i;
		char item[96];
		int len;
		uint64_t s = pos_step(&cs[i], delivered), m = pos_micro(&cs[i], delivered);

		while (k + 1 < n && cs[k + 1].rank == cs[k].rank + 1 &&
		       pos_step(&cs[k + 1], delivered) == s && pos_micro(&cs[k + 1], delivered) == m)
			k++;
		if (k == i)
			len = snprintf(item, sizeof(item), "rank %" PRIu64 " at %" PRIu64 ".%" PRIu64,
				       cs[i].rank, s, m);
		else
			len = snprintf(item, sizeof(item), "ranks %" PRIu64 "-%" PRIu64 " at %" PRIu64
				       ".%" PRIu64, cs[i].rank, cs[k].rank, s, m);
		if (col && col + (size_t)len + 2 > 88) {
			printf(",\n%s", indent);
			col = 0;
		} else if (col) {
			printf(", ");
			col += 2;
		} else {
			printf("%s", indent);
		}
		printf("%s", item);
		col += (size_t)len;
		i = k + 1;
	}
	printf("%s\n", n ? "" : "(no served rank)");
}

static const char *basis_name(enum journal_point_basis b)
{
	return b == JOURNAL_POINT_STATEMENT ? "statement" :
	       b == JOURNAL_POINT_CURSORS ? "cursors" : "empty";
}

static json_t *point_json(const struct journal_point *pt)
{
	char opt[48];

	snprintf(opt, sizeof(opt), "samples:%" PRIu64 "@%" PRIu64, pt->samples, pt->step);
	return json_pack("{s:s, s:o, s:o, s:s, s:s, s:o}",
			 "resume", opt,
			 "samples", json_u64(pt->samples),
			 "step", json_u64(pt->step),
			 "basis", basis_name(pt->basis),
			 "why", pt->why,
			 "warning", pt->warning[0] ? json_string(pt->warning) : json_null());
}

static int emit_json(json_t *o)
{
	char *text;

	if (!o) {
		die_msg("journal: out of memory");
		return 1;
	}
	text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!text) {
		die_msg("journal: out of memory");
		return 1;
	}
	printf("%s\n", text);
	free(text);
	return 0;
}

/* Everything `show` prints, read once. */
struct history {
	struct journal_ident id;
	struct journal_layout *ls;
	size_t nls;
	struct journal_cursor **cur; /* per layout */
	size_t *ncur;
	struct journal_event *marks, *rewinds;
	size_t nmarks, nrewinds;
	struct journal_point pt;
};

static void history_release(struct history *h)
{
	for (size_t i = 0; i < h->nls && h->cur; i++)
		free(h->cur[i]);
	free(h->cur);
	free(h->ncur);
	free(h->ls);
	free(h->marks);
	free(h->rewinds);
}

static int history_load(struct journal *j, const char *path, struct history *h)
{
	int rc;

	memset(h, 0, sizeof(*h));
	journal_identity(j, &h->id);
	rc = journal_layouts(j, &h->ls, &h->nls);
	if (!rc) {
		h->cur = calloc(h->nls + 1, sizeof(*h->cur));
		h->ncur = calloc(h->nls + 1, sizeof(*h->ncur));
		if (!h->cur || !h->ncur)
			rc = -ENOMEM;
	}
	for (size_t i = 0; !rc && i < h->nls; i++)
		rc = journal_cursors(j, h->ls[i].id, &h->cur[i], &h->ncur[i]);
	if (!rc)
		rc = journal_marks(j, &h->marks, &h->nmarks);
	if (!rc)
		rc = journal_rewinds(j, &h->rewinds, &h->nrewinds);
	if (!rc)
		rc = journal_resume_point_ex(j, &h->pt);
	if (rc) {
		char why[256];

		journal_last_error(j, why, sizeof(why));
		die_msg("journal show: cannot read %s: %s", path, why[0] ? why : strerror(-rc));
	}
	return rc;
}

static json_t *cursors_json(const struct journal_cursor *cs, size_t n)
{
	json_t *o = json_object();
	char key[24];

	for (size_t i = 0; o && i < n; i++) {
		snprintf(key, sizeof(key), "%" PRIu64, cs[i].rank);
		json_object_set_new(o, key, json_pack("{s:o, s:o, s:o, s:o}", "step",
						      json_u64(cs[i].step), "micro", json_u64(cs[i].micro),
						      "delivered_step", json_u64(cs[i].delivered_step),
						      "delivered_micro", json_u64(cs[i].delivered_micro)));
	}
	return o;
}

static int show_json(struct journal *j, const char *path, const struct history *h)
{
	json_t *o = json_object(), *layouts = json_array(), *marks = json_array();
	json_t *rewinds = json_array();

	if (!o || !layouts || !marks || !rewinds)
		return emit_json(NULL);
	json_object_set_new(o, "journal", json_string(path));
	json_object_set_new(o, "fingerprint", json_string(h->id.fingerprint));
	json_object_set_new(o, "seed", json_integer((json_int_t)h->id.seed));
	json_object_set_new(o, "shuffle", json_string(order_shuffle_name(h->id.shuffle)));
	json_object_set_new(o, "samples", json_u64(h->id.samples));
	json_object_set_new(o, "split", h->id.split[0] ? json_string(h->id.split) : json_null());
	for (size_t i = 0; i < h->nls; i++) {
		const struct journal_layout *l = &h->ls[i];

		json_t *lj = json_pack("{s:I}", "id", (json_int_t)l->id);

		if (lj && (layout_json_add(lj, l, 1) ||
			   json_object_set_new(lj, "cursors", cursors_json(h->cur[i], h->ncur[i])) ||
			   json_object_set_new(lj, "consumed_samples", json_u64(consumed_of(
				   &l->layout, h->cur[i], h->ncur[i]))) ||
			   json_object_set_new(lj, "weights", l->weights[0] ?
					       json_string(l->weights) : json_null()))) {
			json_decref(lj);
			lj = NULL;
		}
		json_array_append_new(layouts, lj);
	}
	json_object_set_new(o, "layouts", layouts);
	for (size_t i = 0; i < h->nmarks; i++)
		json_array_append_new(marks, json_pack("{s:o, s:o, s:I, s:I, s:I}",
			"step", json_u64(h->marks[i].step), "samples", json_u64(h->marks[i].gsn),
			"time", (json_int_t)(h->marks[i].time_us / 1000000),
			"time_us", (json_int_t)h->marks[i].time_us,
			"layout", (json_int_t)h->marks[i].layout_id));
	json_object_set_new(o, "checkpoints", marks);
	for (size_t i = 0; i < h->nrewinds; i++) {
		struct journal_cursor *from = NULL;
		size_t nfrom = 0;

		if (journal_rewind_cursors(j, h->rewinds[i].id, &from, &nfrom)) {
			json_decref(o);
			die_msg("journal show: cannot read the rewinds of %s", path);
			return 1;
		}
		json_array_append_new(rewinds, json_pack("{s:o, s:o, s:I, s:I, s:I, s:o}",
			"step", json_u64(h->rewinds[i].step), "samples", json_u64(h->rewinds[i].gsn),
			"time", (json_int_t)(h->rewinds[i].time_us / 1000000),
			"time_us", (json_int_t)h->rewinds[i].time_us,
			"layout", (json_int_t)h->rewinds[i].layout_id,
			"from", cursors_json(from, nfrom)));
		free(from);
	}
	json_object_set_new(o, "rewinds", rewinds);
	json_object_set_new(o, "consumed_samples", h->nls ?
			    json_u64(consumed_of(&h->ls[h->nls - 1].layout, h->cur[h->nls - 1],
					     h->ncur[h->nls - 1])) : json_u64(0));
	json_object_set_new(o, "resume_point", point_json(&h->pt));
	return emit_json(o);
}

static int show_text(struct journal *j, const char *path, const struct history *h)
{
	char when[32];

	printf("journal      %s\n", path);
	printf("identity     fingerprint %s, seed %" PRIu64 ", shuffle %s%s%s (%" PRIu64
	       " samples)\n", h->id.fingerprint, h->id.seed, order_shuffle_name(h->id.shuffle),
	       h->id.split[0] ? ", split " : "", h->id.split, h->id.samples);
	printf("\nlayouts (oldest first; times UTC):\n");
	if (!h->nls)
		printf("  none: no mount has started on this journal\n");
	else
		printf("  %4s  %-19s  %-12s %6s %6s %5s  %-9s %10s %14s\n", "id", "started", "host",
		       "W", "B", "m", "ranks", "start_step", "start_samples");
	for (size_t i = 0; i < h->nls; i++) {
		const struct journal_layout *l = &h->ls[i];

		printf("  %4" PRId64 "  %-19s  %-12.12s %6" PRIu64 " %6" PRIu64 " %5" PRIu64
		       "  %-9s %10" PRIu64 " %14" PRIu64 "\n", l->id, utc(l->time, when, sizeof(when)),
		       l->host, layout_world_size(&l->layout), layout_global_batch(&l->layout),
		       layout_micro_batch(&l->layout),
		       l->ranks, layout_start_step(&l->layout), layout_start_samples(&l->layout));
		printf("        resume  %s\n", l->resume);
		if (l->weights[0])
			printf("        weights %s (the mixture's, in source order)\n", l->weights);
		printf("        consumed_samples %" PRIu64 "; cursors (next claim, step.micro):\n",
		       consumed_of(&l->layout, h->cur[i], h->ncur[i]));
		print_cursors(h->cur[i], h->ncur[i], "          ", 0);
		printf("        delivered (every claim before it was read to its end or closed):\n");
		print_cursors(h->cur[i], h->ncur[i], "          ", 1);
	}
	printf("\ncheckpoint marks:%s\n", h->nmarks ? "" : " none");
	for (size_t i = 0; i < h->nmarks; i++)
		printf("  step %" PRIu64 " (samples %" PRIu64 ") at %s in layout %" PRId64 "\n",
		       h->marks[i].step, h->marks[i].gsn,
		       utc(h->marks[i].time_us / 1000000, when, sizeof(when)), h->marks[i].layout_id);
	printf("\nrewinds:%s\n", h->nrewinds ? "" : " none");
	for (size_t i = 0; i < h->nrewinds; i++) {
		struct journal_cursor *from = NULL;
		size_t nfrom = 0;

		printf("  to step %" PRIu64 " (samples %" PRIu64 ") at %s in layout %" PRId64
		       ", from:\n", h->rewinds[i].step, h->rewinds[i].gsn,
		       utc(h->rewinds[i].time_us / 1000000, when, sizeof(when)),
		       h->rewinds[i].layout_id);
		if (journal_rewind_cursors(j, h->rewinds[i].id, &from, &nfrom)) {
			die_msg("journal show: cannot read the rewinds of %s", path);
			return 1;
		}
		print_cursors(from, nfrom, "    ", 0);
		free(from);
	}
	printf("\nconsumed_samples  %" PRIu64 "%s\n", h->nls ?
	       consumed_of(&h->ls[h->nls - 1].layout, h->cur[h->nls - 1], h->ncur[h->nls - 1]) : 0,
	       h->nls ? " (the last layout)" : "");
	printf("resume point      samples:%" PRIu64 " (step %" PRIu64 "): %s\n", h->pt.samples,
	       h->pt.step, h->pt.why);
	if (h->pt.warning[0])
		printf("warning           %s\n", h->pt.warning);
	return 0;
}

static int cmd_show(int argc, char **argv)
{
	struct journal *j;
	struct history h;
	char err[512];
	int json, rc = parse_opts(argc, argv, &json);

	if (rc >= 0)
		return rc;
	if (argc - optind != 1) {
		die_msg("journal show: expected one journal PATH; see zephon journal --help");
		return 2;
	}
	if (journal_open_readonly(argv[optind], &j, err, sizeof(err))) {
		die_msg("%s", err);
		return 1;
	}
	if (history_load(j, argv[optind], &h)) {
		history_release(&h);
		journal_close(j);
		return 1;
	}
	rc = json ? show_json(j, argv[optind], &h) : show_text(j, argv[optind], &h);
	history_release(&h);
	journal_close(j);
	return rc;
}

static int cmd_resume_point(int argc, char **argv)
{
	struct journal_point pt;
	char err[512];
	int json, rc = parse_opts(argc, argv, &json);
	json_t *o, *paths;

	if (rc >= 0)
		return rc;
	if (argc - optind < 1) {
		die_msg("journal resume-point: expected one or more journal PATHs (one per node); "
			"see zephon journal --help");
		return 2;
	}
	if (journal_resume_point_files_ex((const char *const *)argv + optind,
					  (size_t)(argc - optind), &pt, err, sizeof(err))) {
		die_msg("%s", err);
		return 1;
	}
	if (!json) {
		if (pt.warning[0])
			die_msg("warning: %s", pt.warning);
		printf("samples:%" PRIu64 "@%" PRIu64 "\n", pt.samples, pt.step);
		return 0;
	}
	o = point_json(&pt);
	paths = json_array();
	if (!o || !paths)
		return emit_json(NULL);
	for (int i = optind; i < argc; i++)
		json_array_append_new(paths, json_string(argv[i]));
	json_object_set_new(o, "journals", paths);
	json_object_set_new(o, "last_layout", pt.basis == JOURNAL_POINT_EMPTY ? json_null() :
		json_pack("{s:o, s:o, s:o, s:o, s:o}",
			  "world_size", json_u64(layout_world_size(&pt.last)),
			  "global_batch", json_u64(layout_global_batch(&pt.last)),
			  "micro_batch", json_u64(layout_micro_batch(&pt.last)),
			  "start_step", json_u64(layout_start_step(&pt.last)),
			  "start_samples", json_u64(layout_start_samples(&pt.last))));
	return emit_json(o);
}

int cmd_journal(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "show"))
		return cmd_show(argc - 1, argv + 1);
	if (!strcmp(argv[1], "resume-point"))
		return cmd_resume_point(argc - 1, argv + 1);
	die_msg("journal: unknown subcommand '%s' (show or resume-point); see zephon journal "
		"--help", argv[1]);
	return 2;
}
