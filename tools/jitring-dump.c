/* SPDX-License-Identifier: MIT */
/*
 * jitring-dump: print or validate a perf jitdump file.
 *
 *   jitring-dump [--json] [--check] [--sorted] [--allow-truncated] FILE
 *
 * Exit status: 0 valid (or dumped completely), 1 the file breaks a rule,
 * 2 usage error or unreadable file.  Uses the independent reader in
 * src/reader.c, never the encoder's structs.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reader.h"

#define EXIT_VIOLATION 1
#define EXIT_USAGE 2

struct image {
	const unsigned char *p;
	size_t len;
	void *map;
	unsigned char *heap;
};

static int read_all(int fd, struct image *img)
{
	size_t cap = 0, len = 0;
	unsigned char *buf = NULL, *nbuf;
	ssize_t n;

	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 65536;
			nbuf = realloc(buf, cap);
			if (!nbuf) {
				free(buf);
				return -ENOMEM;
			}
			buf = nbuf;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			n = -errno;
			free(buf);
			return (int)n;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	img->heap = buf;
	img->p = buf;
	img->len = len;
	return 0;
}

/* mmap a regular non-empty file; read anything else (empty files, pipes). */
static int image_open(const char *path, struct image *img)
{
	struct stat st;
	int fd, ret = 0;
	void *map;

	memset(img, 0, sizeof(*img));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		ret = -EISDIR;
		goto out;
	}
	if (S_ISREG(st.st_mode) && st.st_size > 0) {
		/* Populate: the checker touches every page anyway, and one
		 * fault per 4 KiB costs a third of the run time. */
		map = mmap(NULL, (size_t)st.st_size, PROT_READ,
			   MAP_PRIVATE | MAP_POPULATE, fd, 0);
		if (map != MAP_FAILED) {
			madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
			img->map = map;
			img->p = map;
			img->len = (size_t)st.st_size;
			goto out;
		}
	}
	ret = read_all(fd, img);
out:
	close(fd);
	return ret;
}

static void image_close(struct image *img)
{
	if (img->map)
		munmap(img->map, img->len);
	free(img->heap);
}

static void usage(FILE *f, const char *prog)
{
	const struct jitring_check_rule *rule;
	size_t i, n;

	fprintf(f,
		"Usage: %s [--json] [--check] [--sorted] [--allow-truncated] FILE\n"
		"\n"
		"Print the records of a perf jitdump file, one line each, or\n"
		"validate it against what perf 6.1 requires.\n"
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

/*
 * A JSON string.  Control characters become \u00XX; bytes that are not
 * UTF-8 are read as Latin-1 (\u00XX) so the output is always valid JSON.
 */
static void put_json_str(FILE *f, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, l;

	putc_unlocked('"', f);
	while (i < n) {
		for (l = i; l < n && s[l] >= 0x20 && s[l] < 0x7f &&
			    s[l] != '"' && s[l] != '\\'; l++)
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
		} else if ((l = utf8_len(s + i, n - i)) != 0) {
			fwrite(s + i, 1, l, f);
			i += l;
		} else {
			fprintf(f, "\\u%04x", s[i++]);
		}
	}
	putc_unlocked('"', f);
}

/* A name in text mode: keep one line per record, escape what is odd. */
static void put_text_str(FILE *f, const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, l;

	while (i < n) {
		for (l = i; l < n && s[l] >= 0x20 && s[l] != 0x7f &&
			    s[l] != '\\'; l++)
			;
		fwrite(s + i, 1, l - i, f);
		if (l < n)
			fprintf(f, "\\x%02x", s[l++]);
		i = l;
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
		fprintf(f, " index=%" PRIu64 " addr=%#" PRIx64
			" old_addr=%#" PRIx64, rec->code_index,
			rec->new_code_addr, rec->old_code_addr);
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
	fprintf(f, "{\"offset\":%zu,\"type\":\"%s\",\"id\":%" PRIu32
		",\"ts\":%" PRIu64 ",\"size\":%" PRIu32, rec->off,
		jitring_reader_type_name(rec->id), rec->id, rec->ts,
		rec->size);
	switch (rec->id) {
	case JITRING_RD_CODE_LOAD:
		fprintf(f, ",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32
			",\"code_index\":%" PRIu64 ",\"addr\":%" PRIu64
			",\"code_size\":%" PRIu64 ",\"vma\":%" PRIu64
			",\"name\":", rec->pid, rec->tid, rec->code_index,
			rec->code_addr, rec->code_size, rec->vma);
		put_json_str(f, rec->name, rec->name_len);
		break;
	case JITRING_RD_CODE_MOVE:
		fprintf(f, ",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32
			",\"code_index\":%" PRIu64 ",\"addr\":%" PRIu64
			",\"old_addr\":%" PRIu64 ",\"code_size\":%" PRIu64
			",\"vma\":%" PRIu64, rec->pid, rec->tid,
			rec->code_index, rec->new_code_addr,
			rec->old_code_addr, rec->code_size, rec->vma);
		break;
	case JITRING_RD_CODE_DEBUG_INFO:
		fprintf(f, ",\"addr\":%" PRIu64 ",\"nr_entry\":%" PRIu64,
			rec->code_addr, rec->nr_entry);
		break;
	case JITRING_RD_CODE_UNWINDING_INFO:
		fprintf(f, ",\"unwinding_size\":%" PRIu64
			",\"eh_frame_hdr_size\":%" PRIu64
			",\"mapped_size\":%" PRIu64, rec->unwinding_size,
			rec->eh_frame_hdr_size, rec->mapped_size);
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
		       ",\"detail\":", rule, off);
		put_json_str(stdout, detail, strlen(detail));
		fputs("}\n", stdout);
	} else {
		printf("%s: offset %" PRIu64 ": rule %s: %s\n", path, off, rule,
		       detail);
	}
}

static int dump(const char *path, const struct image *img, unsigned int flags,
		bool json)
{
	struct jitring_reader r;
	struct jitring_rd_record rec;
	int ret;

	ret = jitring_reader_init(&r, img->p, img->len,
				  flags & JITRING_CHECK_ALLOW_TRUNCATED, NULL);
	while (ret == 0) {
		ret = jitring_reader_next(&r, &rec);
		if (ret <= 0)
			break;
		if (json)
			print_json(stdout, &rec);
		else
			print_text(stdout, &rec);
		ret = 0;
	}
	fflush(stdout);
	if (ret == -EBADMSG) {
		fprintf(stderr, "%s: offset %zu: rule %s: %s\n", path,
			r.err_off, r.rule, r.detail);
		return EXIT_VIOLATION;
	}
	if (ret < 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(-ret));
		return EXIT_USAGE;
	}
	if (r.truncated)
		fprintf(stderr,
			"%s: truncated last record (%zu bytes) ignored\n",
			path, r.truncated);
	return 0;
}

static void summary_text(const char *path,
			 const struct jitring_check_result *res)
{
	uint64_t span = res->ts_max - res->ts_min;
	bool ticks = res->header.flags & JITRING_RD_FLAG_ARCH_TIMESTAMP;
	uint32_t id;

	printf("%s: ok: %" PRIu64 " records, %" PRIu64 " pids, %" PRIu64
	       " tids, span %" PRIu64, path, res->records, res->pids,
	       res->tids, span);
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
	       ",\"zero_tail\":%" PRIu64 ",\"truncated\":%" PRIu64 "}\n",
	       res->pids, res->tids, res->ts_min, res->ts_max, span,
	       res->header.flags & JITRING_RD_FLAG_ARCH_TIMESTAMP ? "true" :
								     "false",
	       res->file_size, res->zero_tail, res->truncated);
}

static int check(const char *path, const struct image *img,
		 unsigned int flags, bool json)
{
	struct jitring_check_result res;
	int ret;

	ret = jitring_check(img->p, img->len, flags, &res);
	if (ret < 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(-ret));
		return EXIT_USAGE;
	}
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
	struct image img;
	const char *path;
	int c, ret;

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
	ret = image_open(path, &img);
	if (ret < 0) {
		fprintf(stderr, "%s: %s: %s\n", argv[0], path, strerror(-ret));
		return EXIT_USAGE;
	}
	setvbuf(stdout, outbuf, _IOFBF, sizeof(outbuf));
	if (do_check)
		ret = check(path, &img, flags, json);
	else
		ret = dump(path, &img, flags, json);
	image_close(&img);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: write error: %s\n", argv[0],
			strerror(errno));
		return EXIT_USAGE;
	}
	return ret;
}
