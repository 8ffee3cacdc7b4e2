/* SPDX-License-Identifier: MIT */
/*
 * jitring-dump: print or validate a perf jitdump file.
 *
 *   jitring-dump [--json] [--check] [--sorted] [--allow-truncated] FILE
 *
 * Exit status: 0 valid (or dumped completely), 1 the file breaks a rule,
 * 2 usage error or unreadable file.  Uses the independent reader in
 * src/reader/reader.c, never the encoder's structs.
 *
 * The file is read as a stream through a bounded window (struct
 * jitring_rd_stream), never mapped: a live dump that the library truncates
 * after a write error would raise SIGBUS in a mapping, and a pipe may never
 * end.  A regular file is read up to the size it had when opened; one that
 * shrinks meanwhile is reported (exit 2).  Devices are refused.
 *
 * Everything printed from the file (function names) is escaped: the
 * terminal never sees a C0 or C1 control character or DEL, neither as a
 * raw byte nor UTF-8 encoded.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reader/reader.h"

#define EXIT_VIOLATION 1
#define EXIT_USAGE 2

static void usage(FILE *f, const char *prog)
{
	const struct jitring_check_rule *rule;
	size_t i, n;

	fprintf(f,
		"Usage: %s [--json] [--check] [--sorted] [--allow-truncated] FILE\n"
		"\n"
		"Print the records of a perf jitdump file, one line each, or\n"
		"validate it against what perf 6.1 requires.  FILE is a regular\n"
		"file (read up to its size at start; exit 2 if it shrinks), a\n"
		"pipe or a socket, read in bounded memory; devices are refused.\n"
		"\n"
		"  -j, --json             JSON Lines output\n"
		"  -c, --check            validate; print the first violation as\n"
		"                         'FILE: offset N: rule RULE: detail'\n"
		"                         (exit 1) or a summary (exit 0)\n"
		"  -s, --sorted           with --check: timestamps must be non-zero\n"
		"                         and non-decreasing in file order\n"
		"  -t, --allow-truncated  accept a last record cut short by EOF\n"
		"  -h, --help             this text\n"
		"\n"
		"--check also warns, without failing, about DEBUG_INFO line\n"
		"tables that end before their code does (perf gives that code\n"
		"no source line).\n"
		"\n"
		"Exit status: 0 ok, 1 rule violation, 2 usage or I/O error.\n"
		"\n"
		"Rules:\n",
		prog);
	rule = jitring_check_rules(&n);
	for (i = 0; i < n; i++)
		fprintf(f, "  %-19s %s\n", rule[i].name, rule[i].desc);
}

/* Length of the valid UTF-8 sequence at @s (at most @n bytes), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len, i;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

/* A C1 control character (U+0080..U+009F) encoded in UTF-8. */
static bool is_utf8_c1(const unsigned char *s, size_t len)
{
	return len == 2 && s[0] == 0xc2 && s[1] <= 0x9f;
}

/*
 * A JSON string.  Control characters (C0, DEL and C1) become \u00XX; bytes
 * that are not UTF-8 are read as Latin-1 (\u00XX) so the output is always
 * valid JSON.
 */
static void put_json_str(FILE *f, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, l;

	putc_unlocked('"', f);
	while (i < n) {
		for (l = i; l < n && s[l] >= 0x20 && s[l] < 0x7f &&
			    s[l] != '"' && s[l] != '\\';
		     l++)
			;
		if (l > i) {
			/* A run of plain ASCII goes out in one piece. */
			fwrite(s + i, 1, l - i, f);
			i = l;
			continue;
		}
		if (s[i] == '"' || s[i] == '\\') {
			putc_unlocked('\\', f);
			putc_unlocked(s[i++], f);
		} else if (s[i] < 0x20 || s[i] == 0x7f) {
			fprintf(f, "\\u%04x", s[i++]);
		} else if ((l = utf8_len(s + i, n - i)) != 0 &&
			   is_utf8_c1(s + i, l)) {
			/* Legal raw in JSON, but not for a terminal. */
			fprintf(f, "\\u%04x", s[i + 1]);
			i += l;
		} else if (l != 0) {
			fwrite(s + i, 1, l, f);
			i += l;
		} else {
			fprintf(f, "\\u%04x", s[i++]);
		}
	}
	putc_unlocked('"', f);
}

/*
 * A name in text mode: one line per record, nothing a terminal would act
 * on.  Printable ASCII and valid UTF-8 of printable code points pass;
 * every other byte (C0 controls, DEL, the backslash itself, the raw bytes
 * 0x80-0x9f an 8-bit terminal takes as C1 controls, the UTF-8 encodings of
 * U+0080..U+009F, which a UTF-8 terminal takes as the same controls, and
 * bytes that are not UTF-8) is written as \xHH.
 */
static void put_text_str(FILE *f, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, l;

	while (i < n) {
		for (l = i;
		     l < n && s[l] >= 0x20 && s[l] < 0x7f && s[l] != '\\'; l++)
			;
		if (l > i) {
			fwrite(s + i, 1, l - i, f);
			i = l;
			continue;
		}
		l = s[i] >= 0x80 ? utf8_len(s + i, n - i) : 0;
		if (l && !is_utf8_c1(s + i, l)) {
			fwrite(s + i, 1, l, f);
			i += l;
			continue;
		}
		/* One byte at a time, so a C1 sequence is spelled in full. */
		fprintf(f, "\\x%02x", s[i++]);
	}
}

static void print_text(FILE *f, const struct jitring_rd_record *rec)
{
	fprintf(f, "%#010zx %-19s ts=%" PRIu64 " size=%" PRIu32, rec->off,
		jitring_reader_type_name(rec->id), rec->ts, rec->size);
	switch (rec->id) {
	case JITRING_RD_CODE_LOAD:
		fprintf(f, " index=%" PRIu64 " addr=%#" PRIx64 " name=",
			rec->code_index, rec->code_addr);
		put_text_str(f, rec->name, rec->name_len);
		break;
	case JITRING_RD_CODE_MOVE:
		fprintf(f,
			" index=%" PRIu64 " addr=%#" PRIx64
			" old_addr=%#" PRIx64,
			rec->code_index, rec->new_code_addr,
			rec->old_code_addr);
		break;
	case JITRING_RD_CODE_DEBUG_INFO:
		fprintf(f, " addr=%#" PRIx64 " entries=%" PRIu64,
			rec->code_addr, rec->nr_entry);
		break;
	case JITRING_RD_CODE_UNWINDING_INFO:
		fprintf(f, " unwinding_size=%" PRIu64 " mapped_size=%" PRIu64,
			rec->unwinding_size, rec->mapped_size);
		break;
	default:
		break;
	}
	putc_unlocked('\n', f);
}

static void print_json(FILE *f, const struct jitring_rd_record *rec)
{
	fprintf(f,
		"{\"offset\":%zu,\"type\":\"%s\",\"id\":%" PRIu32
		",\"ts\":%" PRIu64 ",\"size\":%" PRIu32,
		rec->off, jitring_reader_type_name(rec->id), rec->id, rec->ts,
		rec->size);
	switch (rec->id) {
	case JITRING_RD_CODE_LOAD:
		fprintf(f,
			",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32
			",\"code_index\":%" PRIu64 ",\"addr\":%" PRIu64
			",\"code_size\":%" PRIu64 ",\"vma\":%" PRIu64
			",\"name\":",
			rec->pid, rec->tid, rec->code_index, rec->code_addr,
			rec->code_size, rec->vma);
		put_json_str(f, rec->name, rec->name_len);
		break;
	case JITRING_RD_CODE_MOVE:
		fprintf(f,
			",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32
			",\"code_index\":%" PRIu64 ",\"addr\":%" PRIu64
			",\"old_addr\":%" PRIu64 ",\"code_size\":%" PRIu64
			",\"vma\":%" PRIu64,
			rec->pid, rec->tid, rec->code_index, rec->new_code_addr,
			rec->old_code_addr, rec->code_size, rec->vma);
		break;
	case JITRING_RD_CODE_DEBUG_INFO:
		fprintf(f, ",\"addr\":%" PRIu64 ",\"nr_entry\":%" PRIu64,
			rec->code_addr, rec->nr_entry);
		break;
	case JITRING_RD_CODE_UNWINDING_INFO:
		fprintf(f,
			",\"unwinding_size\":%" PRIu64
			",\"eh_frame_hdr_size\":%" PRIu64
			",\"mapped_size\":%" PRIu64,
			rec->unwinding_size, rec->eh_frame_hdr_size,
			rec->mapped_size);
		break;
	default:
		break;
	}
	fputs("}\n", f);
}

static void print_violation(const char *path, bool json, const char *rule,
			    uint64_t off, const char *detail)
{
	if (json) {
		fputs("{\"file\":", stdout);
		put_json_str(stdout, path, strlen(path));
		printf(",\"valid\":false,\"rule\":\"%s\",\"offset\":%" PRIu64
		       ",\"detail\":",
		       rule, off);
		put_json_str(stdout, detail, strlen(detail));
		fputs("}\n", stdout);
	} else {
		printf("%s: offset %" PRIu64 ": rule %s: %s\n", path, off, rule,
		       detail);
	}
}

/* An I/O error or the end of a stream that was not a clean EOF. */
static int stream_error(const char *path, const struct jitring_rd_stream *st,
			int err)
{
	if (err == -ENODATA)
		fprintf(stderr,
			"%s: the file shrank while it was read: it had %" PRIu64
			" bytes, only %" PRIu64
			" were there (a writer truncated it; check it again when it is quiet)\n",
			path, st->size, st->pos);
	else
		fprintf(stderr, "%s: %s\n", path, strerror(-err));
	return EXIT_USAGE;
}

static int dump(const char *path, struct jitring_rd_stream *st, bool json)
{
	struct jitring_rd_record rec;
	int ret;

	while ((ret = jitring_stream_next(st, &rec)) > 0) {
		if (json)
			print_json(stdout, &rec);
		else
			print_text(stdout, &rec);
	}
	fflush(stdout);
	if (ret == -EBADMSG) {
		fprintf(stderr, "%s: offset %zu: rule %s: %s\n", path,
			st->r.err_off, st->r.rule, st->r.detail);
		return EXIT_VIOLATION;
	}
	if (ret < 0)
		return stream_error(path, st, ret);
	if (st->r.truncated)
		fprintf(stderr,
			"%s: truncated last record (%zu bytes) ignored\n", path,
			st->r.truncated);
	return 0;
}

static void summary_text(const char *path,
			 const struct jitring_check_result *res)
{
	uint64_t span = res->ts_max - res->ts_min;
	bool ticks = res->header.flags & JITRING_RD_FLAG_ARCH_TIMESTAMP;
	uint32_t id;

	printf("%s: ok: %" PRIu64 " records, %" PRIu64 " pids, %" PRIu64
	       " tids, span %" PRIu64,
	       path, res->records, res->pids, res->tids, span);
	if (ticks)
		printf(" ticks");
	else
		printf(" ns (%" PRIu64 ".%09" PRIu64 " s)", span / 1000000000u,
		       span % 1000000000u);
	printf(", %" PRIu64 " bytes\n", res->file_size);
	for (id = 0; id < JITRING_RD_NR_IDS; id++)
		printf("  %-20s %" PRIu64 "\n", jitring_reader_type_name(id),
		       res->count[id]);
	printf("  %-20s %" PRIu64 "\n", "trailing zero bytes", res->zero_tail);
	if (res->truncated)
		printf("  %-20s %" PRIu64 " bytes (tolerated)\n",
		       "truncated tail", res->truncated);
	if (res->lines_uncovered)
		printf("warning: %" PRIu64
		       " DEBUG_INFO line table(s) end before their code does"
		       " (first at offset %" PRIu64
		       "): perf gives the code after the last row no source"
		       " line; end each table with a row at code_addr +"
		       " code_size\n",
		       res->lines_uncovered, res->lines_uncovered_off);
}

static void summary_json(const char *path,
			 const struct jitring_check_result *res)
{
	uint64_t span = res->ts_max - res->ts_min;
	uint32_t id;

	fputs("{\"file\":", stdout);
	put_json_str(stdout, path, strlen(path));
	printf(",\"valid\":true,\"records\":%" PRIu64 ",\"counts\":{",
	       res->records);
	for (id = 0; id < JITRING_RD_NR_IDS; id++)
		printf("%s\"%s\":%" PRIu64, id ? "," : "",
		       jitring_reader_type_name(id), res->count[id]);
	printf("},\"pids\":%" PRIu64 ",\"tids\":%" PRIu64 ",\"ts_min\":%" PRIu64
	       ",\"ts_max\":%" PRIu64 ",\"span\":%" PRIu64
	       ",\"arch_timestamp\":%s,\"bytes\":%" PRIu64
	       ",\"zero_tail\":%" PRIu64 ",\"truncated\":%" PRIu64
	       ",\"lines_uncovered\":%" PRIu64 "}\n",
	       res->pids, res->tids, res->ts_min, res->ts_max, span,
	       res->header.flags & JITRING_RD_FLAG_ARCH_TIMESTAMP ? "true" :
								    "false",
	       res->file_size, res->zero_tail, res->truncated,
	       res->lines_uncovered);
}

static int check(const char *path, struct jitring_rd_stream *st,
		 unsigned int flags, bool json)
{
	struct jitring_check_result res;
	int ret;

	ret = jitring_check_stream(st, flags, &res);
	if (ret < 0)
		return stream_error(path, st, ret);
	if (ret > 0)
		print_violation(path, json, res.rule, res.off, res.detail);
	else if (json)
		summary_json(path, &res);
	else
		summary_text(path, &res);
	return ret ? EXIT_VIOLATION : 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "check", no_argument, NULL, 'c' },
		{ "sorted", no_argument, NULL, 's' },
		{ "allow-truncated", no_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static char outbuf[1 << 20];
	unsigned int flags = 0;
	bool json = false, do_check = false;
	struct jitring_rd_stream st;
	const char *path;
	int c, fd, ret;

	while ((c = getopt_long(argc, argv, "jcsth", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'c':
			do_check = true;
			break;
		case 's':
			flags |= JITRING_CHECK_SORTED;
			break;
		case 't':
			flags |= JITRING_CHECK_ALLOW_TRUNCATED;
			break;
		case 'h':
			usage(stdout, program_invocation_short_name);
			return 0;
		default:
			usage(stderr, program_invocation_short_name);
			return EXIT_USAGE;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "%s: expected exactly one FILE\n", argv[0]);
		usage(stderr, program_invocation_short_name);
		return EXIT_USAGE;
	}
	path = argv[optind];
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "%s: %s: %s\n", argv[0], path, strerror(errno));
		return EXIT_USAGE;
	}
	ret = jitring_stream_open(&st, fd,
				  flags & JITRING_CHECK_ALLOW_TRUNCATED);
	if (ret < 0) {
		fprintf(stderr, "%s: %s: %s\n", argv[0], path,
			ret == -ENODEV ?
				"not a regular file, pipe or socket (a device is never a jitdump file, and some never end)" :
				strerror(-ret));
		close(fd);
		return EXIT_USAGE;
	}
	setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
	if (do_check)
		ret = check(path, &st, flags, json);
	else
		ret = dump(path, &st, json);
	jitring_stream_close(&st);
	close(fd);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: write error: %s\n", argv[0],
			strerror(errno));
		return EXIT_USAGE;
	}
	return ret;
}
