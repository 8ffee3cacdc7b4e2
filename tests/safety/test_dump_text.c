/* SPDX-License-Identifier: MIT */
/*
 * jitring-dump never hands a terminal a control character from the file:
 * function names with C0 controls (an ANSI escape
 * sequence), DEL, the raw byte 0x9b (CSI to an 8-bit terminal), the UTF-8
 * encoding of U+009B (CSI to a UTF-8 terminal, e.g. xterm), other C1
 * characters, and bytes that are not UTF-8.
 *
 * Text mode escapes each such byte as \xHH and keeps printable UTF-8; JSON
 * mode writes \u00XX.  Checked two ways: the exact escaped names, and a
 * scan of the whole output for any C0 (but the newline), DEL or C1 code
 * point, raw or UTF-8 encoded.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "hostile.h"

static const struct {
	const char *name;
	const char *text; /* as text mode prints it */
	const char *json; /* as JSON mode prints it, quotes included */
} names[] = {
	{ "red\x1b[31mX", "red\\x1b[31mX", "\"red\\u001b[31mX\"" },
	{ "del\x7f", "del\\x7f", "\"del\\u007f\"" },
	{ "csi8\x9b" "31m", "csi8\\x9b31m", "\"csi8\\u009b31m\"" },
	{ "csi\xc2\x9b" "31m", "csi\\xc2\\x9b31m", "\"csi\\u009b31m\"" },
	{ "nel\xc2\x85osc\xc2\x9dst\xc2\x9c", "nel\\xc2\\x85osc\\xc2\\x9dst\\xc2\\x9c",
	  "\"nel\\u0085osc\\u009dst\\u009c\"" },
	{ "ok\xc2\xa0\xc3\xa9\xe2\x82\xac", "ok\xc2\xa0\xc3\xa9\xe2\x82\xac",
	  "\"ok\xc2\xa0\xc3\xa9\xe2\x82\xac\"" },
	{ "bad\xff\xc2", "bad\\xff\\xc2", "\"bad\\u00ff\\u00c2\"" },
	{ "back\\slash\ttab", "back\\x5cslash\\x09tab",
	  "\"back\\\\slash\\u0009tab\"" },
};

#define NR_NAMES (sizeof(names) / sizeof(names[0]))

/* Decode one UTF-8 sequence at @s; 0 if it is not one. */
static size_t utf8_cp(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t len, i;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, *cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, *cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, *cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		*cp = *cp << 6 | (s[i] & 0x3f);
	}
	return len;
}

/* Return: the offset of the first control character in @s, or -1. */
static long first_control(const unsigned char *s, size_t n)
{
	size_t i = 0, l;
	uint32_t cp;

	while (i < n) {
		l = utf8_cp(s + i, n - i, &cp);
		if (l == 0) {
			/* Not UTF-8: a raw C1 byte is a control to 8-bit
			 * terminals; other bytes are not controls. */
			if (s[i] >= 0x80 && s[i] <= 0x9f)
				return (long)i;
			i++;
			continue;
		}
		if ((cp < 0x20 && cp != '\n') || cp == 0x7f ||
		    (cp >= 0x80 && cp <= 0x9f))
			return (long)i;
		i += l;
	}
	return -1;
}

static size_t run(const char *cmd, char *out, size_t size, int *rc)
{
	size_t n = 0, k;
	FILE *p = popen(cmd, "r");
	int st;

	T_REQUIRE(p);
	while (n + 1 < size && (k = fread(out + n, 1, size - 1 - n, p)) > 0)
		n += k;
	out[n] = '\0';
	st = pclose(p);
	*rc = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return n;
}

int main(void)
{
	const char *root = getenv("JITRING_BUILD_ROOT");
	static char out[1 << 16];
	char tool[512], dir[64], path[128], cmd[1024], want[256];
	struct hostile_buf b = { 0 };
	size_t i, n;
	long bad;
	FILE *f;
	int rc;

	if (!root || !root[0])
		t_skip("JITRING_BUILD_ROOT not set");
	snprintf(tool, sizeof(tool), "%s/tools/jitring-dump", root);
	T_REQUIRE(access(tool, X_OK) == 0);
	snprintf(dir, sizeof(dir), "/tmp/jitring-dumptext-XXXXXX");
	T_REQUIRE(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/names.dump", dir);

	hostile_header(&b);
	for (i = 0; i < NR_NAMES; i++)
		hostile_load_named(&b, 10 + i, 1, i + 1, names[i].name);
	f = fopen(path, "wb");
	T_REQUIRE(f && fwrite(b.p, 1, b.len, f) == b.len && fclose(f) == 0);
	free(b.p);

	/* Text. */
	snprintf(cmd, sizeof(cmd), "'%s' '%s'", tool, path);
	n = run(cmd, out, sizeof(out), &rc);
	T_CHECK_EQ(rc, 0);
	bad = first_control((const unsigned char *)out, n);
	if (bad >= 0)
		fprintf(stderr, "text output has a control at %ld: ...%.20s\n",
			bad, out + (bad > 10 ? bad - 10 : 0));
	T_CHECK(bad < 0);
	for (i = 0; i < NR_NAMES; i++) {
		snprintf(want, sizeof(want), " name=%s\n", names[i].text);
		if (!strstr(out, want))
			fprintf(stderr, "text: no '%s' in:\n%s", want, out);
		T_CHECK(strstr(out, want) != NULL);
	}

	/* JSON. */
	snprintf(cmd, sizeof(cmd), "'%s' --json '%s'", tool, path);
	n = run(cmd, out, sizeof(out), &rc);
	T_CHECK_EQ(rc, 0);
	bad = first_control((const unsigned char *)out, n);
	T_CHECK(bad < 0);
	for (i = 0; i < NR_NAMES; i++) {
		snprintf(want, sizeof(want), "\"name\":%s}", names[i].json);
		if (!strstr(out, want))
			fprintf(stderr, "json: no '%s' in:\n%s", want, out);
		T_CHECK(strstr(out, want) != NULL);
	}

	unlink(path);
	rmdir(dir);
	return t_report();
}
