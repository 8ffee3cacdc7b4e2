/* SPDX-License-Identifier: MIT */
/*
 * The trampolines' ELF file (src/format/elf_image.c, and the sets that
 * use it with JITRING_F_TRAMPOLINE_ELF): parsed back here by code of its
 * own, as an unwinder reads it.
 *
 *   layout   the headers, one FDE per slot covering exactly its copy's
 *            code with the template's rules, a sorted .eh_frame_hdr
 *            whose rows find every slot's FDE, unwritten arenas' rows
 *            (0, 0) sorting last; what plan refuses
 *   sets     a writer with the flag makes the file (0700, regular, ours)
 *            in its directory; every copy lies in a mapping of it whose
 *            start - pgoff is the same for all (the object's layout),
 *            holding the template while its place in the file is a hole
 *            (no code on disk), with a row and an FDE for it in the
 *            file; a fork child's arenas agree; the unwind tables are
 *            mapped; the same with arenas that cannot be made private
 *            (a fault point): the template in the file too; no flag, or
 *            a directory others can write: no file (the memfd image)
 *   full     (root) the directory on a tmpfs filled while arenas are
 *            made: no SIGBUS, every copy holds the template
 */
#include <elf.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

#include "common/testpoint.h"
#include "format/elf_image.h"
#include "harness.h"
#include "kit/trampolines.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------ */
/* An independent reader.                                               */

struct parsed {
	const uint8_t *f;
	size_t len;
	const Elf64_Shdr *text, *eh, *hdr;
	uint64_t fde_count;
};

static const Elf64_Shdr *section(const uint8_t *f, const char *name)
{
	const Elf64_Ehdr *e = (const void *)f;
	const Elf64_Shdr *sh = (const void *)(f + e->e_shoff);
	const char *str = (const char *)f + sh[e->e_shstrndx].sh_offset;

	for (unsigned i = 1; i < e->e_shnum; i++)
		if (!strcmp(str + sh[i].sh_name, name))
			return &sh[i];
	return NULL;
}

/* The headers of @f; false (checks failed) if they are not right. */
static bool parse(const uint8_t *f, size_t len, struct parsed *p)
{
	const Elf64_Ehdr *e = (const void *)f;
	const Elf64_Phdr *ph;
	unsigned long before = t_failed;

	memset(p, 0, sizeof(*p));
	p->f = f;
	p->len = len;
	T_REQUIRE(len >= sizeof(*e));
	T_CHECK(!memcmp(e->e_ident, ELFMAG, SELFMAG));
	T_CHECK_EQ(e->e_ident[EI_CLASS], ELFCLASS64);
	T_CHECK_EQ(e->e_type, ET_DYN);
#if defined(__x86_64__)
	T_CHECK_EQ(e->e_machine, EM_X86_64);
#elif defined(__aarch64__)
	T_CHECK_EQ(e->e_machine, EM_AARCH64);
#endif
	T_CHECK_EQ(e->e_phnum, 3);
	T_CHECK(e->e_shoff + (uint64_t)e->e_shnum * sizeof(Elf64_Shdr) <= len);
	p->text = section(f, ".text");
	p->eh = section(f, ".eh_frame");
	p->hdr = section(f, ".eh_frame_hdr");
	T_REQUIRE(p->text && p->eh && p->hdr);
	/* File offset == address, as a linked object's (base 0). */
	T_CHECK_EQ(p->text->sh_addr, p->text->sh_offset);
	T_CHECK_EQ(p->eh->sh_addr, p->eh->sh_offset);
	T_CHECK_EQ(p->hdr->sh_addr, p->hdr->sh_offset);
	T_CHECK(p->text->sh_flags & SHF_EXECINSTR);
	ph = (const void *)(f + e->e_phoff);
	/* The first PT_LOAD at address 0 (perf takes the object's base as
	 * its lowest mapping less this address: the headers' page). */
	T_CHECK_EQ(ph[0].p_type, PT_LOAD);
	T_CHECK_EQ(ph[0].p_offset, 0);
	T_CHECK_EQ(ph[0].p_vaddr, 0);
	T_CHECK_EQ(ph[0].p_filesz, p->text->sh_offset);
	T_CHECK_EQ(ph[1].p_type, PT_LOAD);
	T_CHECK_EQ(ph[1].p_offset, p->text->sh_offset);
	T_CHECK_EQ(ph[1].p_vaddr, p->text->sh_addr);
	T_CHECK_EQ(ph[1].p_offset + ph[1].p_filesz,
		   p->hdr->sh_offset + p->hdr->sh_size);
	T_CHECK_EQ(ph[1].p_flags, PF_R | PF_X);
	T_CHECK_EQ(ph[2].p_type, PT_GNU_EH_FRAME);
	T_CHECK_EQ(ph[2].p_vaddr, p->hdr->sh_addr);
	/* .eh_frame_hdr: version 1, eh_frame_ptr pcrel|sdata4 to .eh_frame,
	 * fde_count udata4, table datarel|sdata4. */
	{
		const uint8_t *h = f + p->hdr->sh_offset;

		T_CHECK_EQ(h[0], 1);
		T_CHECK_EQ(h[1], 0x1b);
		T_CHECK_EQ(h[2], 0x03);
		T_CHECK_EQ(h[3], 0x3b);
		T_CHECK_EQ(p->hdr->sh_addr + 4 + t_rds32(h + 4),
			   p->eh->sh_addr);
		p->fde_count = t_rd32(h + 8);
		T_CHECK_EQ(p->hdr->sh_size, 12 + p->fde_count * 8);
	}
	return t_failed == before;
}

/* Row @i of the search table: (initial_loc, fde) as addresses. */
static void row(const struct parsed *p, uint64_t i, int64_t *loc, int64_t *fde)
{
	const uint8_t *r = p->f + p->hdr->sh_offset + 12 + i * 8;

	*loc = t_rds32(r);
	*fde = t_rds32(r + 4);
}

/*
 * The FDE at address @fde: its CIE must be .eh_frame's first record, its
 * pc_begin @slot, its range @code_size, its rules @rules (the template's
 * FDE from the augmentation length on, @rules_len bytes).
 */
static void check_fde(const struct parsed *p, uint64_t fde, uint64_t slot,
		      uint32_t code_size, const uint8_t *rules,
		      uint32_t rules_len)
{
	const uint8_t *x = p->f + fde; /* offset == address */
	uint32_t len = t_rd32(x);

	T_CHECK(fde >= p->eh->sh_addr &&
		fde + 4 + len <= p->eh->sh_addr + p->eh->sh_size);
	/* The CIE pointer, from its own field back to the CIE. */
	T_CHECK_EQ(fde + 4 - t_rd32(x + 4), p->eh->sh_addr);
	T_CHECK_EQ(t_rd32(p->f + p->eh->sh_offset + 4), 0); /* a CIE */
	T_CHECK_EQ(fde + 8 + t_rds32(x + 8), slot);
	T_CHECK_EQ(t_rd32(x + 12), code_size);
	T_CHECK_EQ(4 + len - 16, rules_len);
	T_CHECK(!memcmp(x + 16, rules, rules_len));
}

/* ------------------------------------------------------------------ */
/* The layout.                                                          */

static const struct jitring_cfi *host_cfi(void)
{
	return jitring_cfi_preset(JITRING_CFI_HOST_FP_TRAMPOLINE);
}

static void test_layout(void)
{
	struct jitring_trampoline_template tmpl;
	struct jitring_elf_image im;
	struct parsed p;
	uint8_t eh[JITRING_EH_FRAME_MAX], *f, *slots, *buf;
	uint32_t slot;
	int eh_size;
	/* Arenas 0 to 2 written (a set writes a prefix); 3 and 4 not. */
	const bool written[] = { true, true, true, false, false };
	uint64_t rows_seen = 0;
	int64_t prev = INT64_MIN;

	T_REQUIRE(jitring_trampoline_builtin(&tmpl) == 0);
	eh_size = jitring_eh_frame_build(host_cfi(), tmpl.code_size, eh,
					 sizeof(eh));
	T_REQUIRE(eh_size > 0);
	slot = (uint32_t)jitring_trampoline_slot_size(tmpl.code_size,
						      (uint64_t)eh_size);
	memset(&im, 0, sizeof(im));
	im.slot_size = slot;
	im.code_size = tmpl.code_size;
	im.eh_frame = eh;
	im.eh_frame_size = (uint32_t)eh_size;
	im.page = (uint32_t)sysconf(_SC_PAGESIZE);
	im.arena_len = 4 * (uint64_t)im.page;
	im.arenas = ARRAY_SIZE(written);
	T_REQUIRE(jitring_elf_image_plan(&im) == 0);
	T_CHECK_EQ(im.arena_slots, im.arena_len / slot);
	T_CHECK_EQ(im.text_off % im.page, 0);
	T_CHECK_EQ(im.unwind_off % im.page, 0);
	T_CHECK_EQ(im.unwind_len % im.page, 0);

	/* The whole file as the set writes it, piece by piece. */
	f = calloc(1, im.size);
	slots = malloc(im.arena_len);
	buf = malloc(im.arena_slots * (im.fde_size + 8) + im.text_off +
		     im.size);
	T_REQUIRE(f && slots && buf);
	memset(slots, 0xcc, im.arena_len);
	for (uint64_t i = 0; i < im.arena_slots; i++)
		memcpy(slots + i * slot, tmpl.code, tmpl.code_size);
	jitring_elf_image_head(&im, buf);
	memcpy(f, buf, im.text_off);
	memcpy(f + im.eh_off, jitring_elf_image_cie(&im), im.cie_size);
	jitring_elf_image_hdr(&im, buf);
	memcpy(f + im.hdr_off, buf, JR_ELF_HDR_FIXED);
	jitring_elf_image_tail(&im, buf);
	memcpy(f + im.str_off, buf, im.size - im.str_off);
	for (uint32_t k = 0; k < im.arenas; k++) {
		if (!written[k])
			continue;
		memcpy(f + im.text_off + k * im.arena_len, slots, im.arena_len);
		jitring_elf_image_fdes(&im, k, buf);
		memcpy(f + jitring_elf_image_fde_off(&im, k), buf,
		       im.arena_slots * im.fde_size);
		jitring_elf_image_rows(&im, k, buf);
		memcpy(f + jitring_elf_image_rows_off(&im, k), buf,
		       im.arena_slots * 8);
	}

	T_REQUIRE(parse(f, im.size, &p));
	T_CHECK_EQ(p.text->sh_offset, im.text_off);
	T_CHECK_EQ(p.text->sh_size, im.arenas * im.arena_len);
	T_CHECK_EQ(p.fde_count, im.arenas * im.arena_slots);
	/* The rows: sorted (the unwritten arenas' (0, 0) last); each
	 * written slot's row finds its FDE, which covers exactly the
	 * copy's code. */
	for (uint32_t k = 0; k < im.arenas; k++) {
		for (uint64_t i = 0; i < im.arena_slots; i++) {
			uint64_t n = k * im.arena_slots + i;
			uint64_t addr =
				im.text_off + k * im.arena_len + i * slot;
			int64_t loc, fde;

			row(&p, n, &loc, &fde);
			if (!written[k]) {
				T_CHECK(loc == 0 && fde == 0);
				continue;
			}
			rows_seen++;
			T_CHECK_EQ((uint64_t)((int64_t)p.hdr->sh_addr + loc),
				   addr);
			T_CHECK(loc < 0);
			check_fde(&p, (uint64_t)((int64_t)p.hdr->sh_addr + fde),
				  addr, tmpl.code_size, eh + im.cie_size + 16,
				  (uint32_t)(eh_size - im.cie_size - 16));
			T_CHECK(!memcmp(f + addr, tmpl.code, tmpl.code_size));
		}
	}
	T_CHECK_EQ(rows_seen, 3 * im.arena_slots);
	for (uint64_t n = 0; n < p.fde_count; n++) {
		int64_t loc, fde;

		row(&p, n, &loc, &fde);
		T_CHECK(loc >= prev);
		prev = loc;
	}

	/* What plan refuses. */
	{
		struct jitring_elf_image bad = im;

		bad.page = 3000;
		T_CHECK_EQ(jitring_elf_image_plan(&bad), -EINVAL);
		bad = im;
		bad.arena_len = im.page + 1;
		T_CHECK_EQ(jitring_elf_image_plan(&bad), -EINVAL);
		bad = im;
		bad.arenas = 0;
		T_CHECK_EQ(jitring_elf_image_plan(&bad), -EINVAL);
		bad = im;
		bad.code_size = slot + 1;
		T_CHECK_EQ(jitring_elf_image_plan(&bad), -EINVAL);
		bad = im;
		bad.eh_frame_size = 4;
		T_CHECK_EQ(jitring_elf_image_plan(&bad), -EINVAL);
		bad = im;
		bad.arena_len = (uint64_t)im.page << 20; /* past 2 GiB */
		bad.arenas = 1024;
		T_CHECK_EQ(jitring_elf_image_plan(&bad), -EINVAL);
	}
	free(f);
	free(slots);
	free(buf);
}

/* ------------------------------------------------------------------ */
/* Sets.                                                                */

/*
 * The one jitring-tramp-*.so in @dir into @path (""), and how many; -1 if
 * @dir cannot be read or a file's path does not fit @len bytes (a cut
 * path would name another file).
 */
static int tramp_file(const char *dir, char *path, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	path[0] = 0;
	if (!d)
		return -1;
	while (n >= 0 && (e = readdir(d))) {
		int pid;

		if (sscanf(e->d_name, "jitring-tramp-%d-", &pid) != 1 ||
		    !strstr(e->d_name, ".so"))
			continue;
		if ((size_t)snprintf(path, len, "%s/%s", dir, e->d_name) < len)
			n++;
		else
			n = -1;
	}
	closedir(d);
	return n;
}

struct mapping {
	uint64_t lo, hi, pgoff;
	char perms[5];
	char path[256];
};

/* The mapping of /proc/self/maps that holds @addr. */
static bool mapping_of(uint64_t addr, struct mapping *m)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi, off;
		char perms[5], path[256] = "";

		if (sscanf(line, "%llx-%llx %4s %llx %*s %*s %255s", &lo, &hi,
			   perms, &off, path) < 4)
			continue;
		if (addr < lo || addr >= hi)
			continue;
		m->lo = lo;
		m->hi = hi;
		m->pgoff = off;
		memcpy(m->perms, perms, sizeof(m->perms));
		snprintf(m->path, sizeof(m->path), "%s", path);
		found = true;
	}
	fclose(f);
	return found;
}

/*
 * Every copy in @addrs lies in a read-execute mapping of @file whose
 * start - pgoff is @base (set from the first when 0), and holds the
 * template, its place in the file a hole (the template where @written);
 * the file (read back whole) has its row and FDE.
 * Also the unwind tables are mapped, at base + their offset.
 */
static void check_copies(const char *file, void *const *addrs, size_t n,
			 const struct jitring_trampoline_template *tmpl,
			 uint64_t *base, bool written)
{
	unsigned char eh[JITRING_EH_FRAME_MAX];
	int eh_size = jitring_eh_frame_build(host_cfi(), tmpl->code_size, eh,
					     sizeof(eh));
	struct parsed p;
	struct mapping m;
	size_t len;
	uint8_t *f = t_slurp(file, &len);
	uint32_t cie;

	T_REQUIRE(f && eh_size > 0);
	T_REQUIRE(parse(f, len, &p));
	cie = t_rd32(eh) + 4;
	for (size_t i = 0; i < n; i++) {
		uint64_t a = (uint64_t)(uintptr_t)addrs[i], off;
		int64_t lo = 0, hi = (int64_t)p.fde_count;

		T_REQUIRE(mapping_of(a, &m));
		T_CHECK(!strcmp(m.path, file));
		T_CHECK(!strcmp(m.perms, "r-xp"));
		if (!*base)
			*base = m.lo - m.pgoff;
		T_CHECK_EQ(m.lo - m.pgoff, *base);
		off = a - *base;
		T_CHECK(off >= p.text->sh_offset &&
			off + tmpl->code_size <=
				p.text->sh_offset + p.text->sh_size);
		/* The template in the copy's memory; its place in the file a
		 * hole (no code on disk, elf_arena()), or, where the arena
		 * could not be made private, the template too. */
		T_CHECK(!memcmp(addrs[i], tmpl->code, tmpl->code_size));
		if (written)
			T_CHECK(!memcmp(f + off, tmpl->code, tmpl->code_size));
		else
			for (uint32_t b = 0; b < tmpl->code_size; b++)
				T_CHECK_EQ(f[off + b], 0);
		/* The row an unwinder's binary search finds. */
		while (lo < hi) {
			int64_t mid = (lo + hi) / 2, l, x;

			row(&p, (uint64_t)mid, &l, &x);
			if ((int64_t)off - (int64_t)p.hdr->sh_addr < l)
				hi = mid;
			else
				lo = mid + 1;
		}
		T_REQUIRE(lo > 0);
		{
			int64_t l, x;

			row(&p, (uint64_t)(lo - 1), &l, &x);
			T_CHECK_EQ((int64_t)p.hdr->sh_addr + l, (int64_t)off);
			check_fde(&p, (uint64_t)((int64_t)p.hdr->sh_addr + x),
				  off, tmpl->code_size, eh + cie + 16,
				  (uint32_t)eh_size - cie - 16);
		}
	}
	/* The headers at the base (the lowest mapping of the file), the
	 * tables where the object has them. */
	T_REQUIRE(mapping_of(*base, &m));
	T_CHECK(!strcmp(m.path, file));
	T_CHECK_EQ(m.lo, *base);
	T_CHECK_EQ(m.pgoff, 0);
	T_REQUIRE(mapping_of(*base + p.hdr->sh_addr, &m));
	T_CHECK(!strcmp(m.path, file));
	T_CHECK_EQ(m.lo - m.pgoff, *base);
	T_REQUIRE(mapping_of(*base + p.eh->sh_addr, &m));
	T_CHECK(!strcmp(m.path, file));
	free(f);
}

#define SET_COPIES 2000u /* three arenas of the built-in template */

static void take(struct jitring_trampolines *set, void **addrs, size_t n,
		 const char *what)
{
	for (size_t i = 0; i < n; i++) {
		char name[64];

		snprintf(name, sizeof(name), "%s_%zu", what, i);
		T_REQUIRE(jitring_trampolines_get(set, name, &addrs[i]) > 0);
	}
}

#ifdef JITRING_TESTPOINTS
/* Arenas that cannot be made private (as on a full tmpfs): written to
 * the file and mapped from it. */
static int no_populate(const char *name, void *arg)
{
	(void)arg;
	return !strcmp(name, "tramp_elf_populate");
}
#endif

static bool set_written; /* test_set(): with no_populate() */

static void test_set(uint32_t engine)
{
	struct jitring_trampoline_template tmpl;
	struct jitring_trampolines *set;
	struct jitring_trampolines_state st;
	struct jitring *jr;
	struct t_dir d;
	struct stat sb;
	char file[512];
	void **addrs = calloc(SET_COPIES, sizeof(void *));
	void **child = calloc(SET_COPIES, sizeof(void *));
	uint64_t base = 0;
	int status = -1;
	pid_t pid;

	T_REQUIRE(addrs && child);
	T_REQUIRE(jitring_trampoline_builtin(&tmpl) == 0);
	t_dir_make(&d, "elftramp");
	T_REQUIRE(t_open(engine, d.path, JITRING_F_TRAMPOLINE_ELF, &jr) == 0);
#ifdef JITRING_TESTPOINTS
	if (set_written)
		atomic_store(&jitring_fault_hook, no_populate);
#endif
	T_REQUIRE(jitring_trampolines_new(jr, &tmpl, &set) == 0);
	T_REQUIRE(tramp_file(d.path, file, sizeof(file)) == 1);
	T_REQUIRE(stat(file, &sb) == 0);
	T_CHECK(S_ISREG(sb.st_mode));
	T_CHECK_EQ(sb.st_mode & 07777, 0700);
	T_CHECK_EQ(sb.st_uid, geteuid());
	jitring_trampolines_state(set, &st);
	T_CHECK_EQ(st.image_maps, 0);

	take(set, addrs, SET_COPIES / 2, "parent");
	fflush(NULL);
	pid = fork();
	T_REQUIRE(pid >= 0);
	if (pid == 0) {
		/* The child goes on in the same file: its arenas (made
		 * from its copy of the set's count) hold the same bytes as
		 * the parent's at the same places. */
		uint64_t cb = 0;

		t_passed = t_failed = 0;
		take(set, child, SET_COPIES, "child");
		check_copies(file, child, SET_COPIES, &tmpl, &cb, set_written);
		_exit(t_failed ? 1 : 0);
	}
	take(set, addrs + SET_COPIES / 2, SET_COPIES / 2, "parent2");
	T_CHECK_EQ(waitpid(pid, &status, 0), pid);
	T_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	check_copies(file, addrs, SET_COPIES, &tmpl, &base, set_written);
	T_CHECK_EQ(jitring_close(jr), 0);
	T_CHECK_EQ(jitring_trampolines_free(set), 0);
#ifdef JITRING_TESTPOINTS
	atomic_store(&jitring_fault_hook, NULL);
#endif
	/* The file stays for perf; still one. */
	T_CHECK_EQ(tramp_file(d.path, file, sizeof(file)), 1);
	t_dir_remove(&d);
	free(addrs);
	free(child);
}

/* No flag, or a directory others can write: no file. */
static void test_no_file(uint32_t engine)
{
	struct jitring_trampoline_template tmpl;
	struct jitring_trampolines *set;
	struct jitring_trampolines_state st;
	struct jitring *jr;
	struct t_dir d;
	char file[512];
	void *addr;

	T_REQUIRE(jitring_trampoline_builtin(&tmpl) == 0);
	for (int shared = 0; shared < 2; shared++) {
		t_dir_make(&d, "elftramp");
		if (shared)
			T_REQUIRE(chmod(d.path, 0777) == 0);
		T_REQUIRE(t_open(engine, d.path,
				 shared ? JITRING_F_TRAMPOLINE_ELF : 0,
				 &jr) == 0);
		T_REQUIRE(jitring_trampolines_new(jr, &tmpl, &set) == 0);
		T_CHECK_EQ(tramp_file(d.path, file, sizeof(file)), 0);
		jitring_trampolines_state(set, &st);
		T_CHECK(st.image_maps > 0); /* the memfd image */
		T_CHECK(jitring_trampolines_get(set, "f", &addr) > 0);
		T_CHECK_EQ(jitring_close(jr), 0);
		T_CHECK_EQ(jitring_trampolines_free(set), 0);
		t_dir_remove(&d);
	}
}

/*
 * The directory on a tmpfs that fills up while arenas are made (root
 * only): the faults that would make an arena private read the file's
 * holes, which take pages of the full tmpfs.  No SIGBUS: every copy
 * handed out holds the template (the arenas that did not fit are
 * anonymous).  12 pages are left, enough for an arena's FDEs and rows,
 * not for its 16 pages of slots.  The mutex engine: arenas are made by
 * the get() that needs one, not by a flusher racing the filler.
 */
static void test_full_tmpfs(void)
{
	struct jitring_trampoline_template tmpl;
	struct jitring_trampolines *set;
	struct jitring *jr;
	struct t_dir d;
	struct statvfs vfs;
	char fill[128];
	void **addrs = calloc(SET_COPIES, sizeof(void *));
	uint8_t page[4096];
	uint64_t left;
	int fd, ret;

	T_REQUIRE(addrs && jitring_trampoline_builtin(&tmpl) == 0);
	t_dir_make(&d, "elffull");
	if (mount("tmpfs", d.path, "tmpfs", 0, "size=1m,mode=0700")) {
		printf("SKIP: full tmpfs: mount: %s\n", strerror(errno));
		t_dir_remove(&d);
		free(addrs);
		return;
	}
	T_REQUIRE(t_open(JITRING_ENGINE_MUTEX, d.path,
			 JITRING_F_TRAMPOLINE_ELF | JITRING_F_RELEASE,
			 &jr) == 0);
	T_REQUIRE(jitring_trampolines_new(jr, &tmpl, &set) == 0);
	/* The file made (the mount is the user's alone, mode 0700). */
	T_REQUIRE(tramp_file(d.path, fill, sizeof(fill)) == 1);
	take(set, addrs, 10, "before");
	snprintf(fill, sizeof(fill), "%s/fill", d.path);
	fd = open(fill, O_WRONLY | O_CREAT | O_EXCL, 0600);
	T_REQUIRE(fd >= 0 && statvfs(d.path, &vfs) == 0);
	memset(page, 'x', sizeof(page));
	for (left = vfs.f_bfree * vfs.f_frsize; left > 12 * sizeof(page);
	     left -= sizeof(page))
		T_REQUIRE(write(fd, page, sizeof(page)) == sizeof(page));
	close(fd);
	take(set, addrs + 10, SET_COPIES - 10, "after");
	for (size_t i = 0; i < SET_COPIES; i++)
		T_CHECK(!memcmp(addrs[i], tmpl.code, tmpl.code_size));
	/* The dump's last writes find the disk full. */
	ret = jitring_close(jr);
	T_CHECK(ret == 0 || ret == -ENOSPC);
	T_CHECK_EQ(jitring_trampolines_free(set), 0);
	T_CHECK_EQ(umount(d.path), 0);
	t_dir_remove(&d);
	free(addrs);
}

int main(void)
{
	struct jitring_trampoline_template t;

	if (jitring_trampoline_builtin(&t) == -EOPNOTSUPP)
		t_skip("no built-in trampoline on this architecture");
	test_layout();
	for (size_t i = 0; i < ARRAY_SIZE(t_engines); i++) {
		t_run("set", t_engines[i], test_set);
#ifdef JITRING_TESTPOINTS
		set_written = true;
		t_run("set, arenas written", t_engines[i], test_set);
		set_written = false;
#endif
		t_run("no file", t_engines[i], test_no_file);
	}
	test_full_tmpfs();
	return t_report();
}
