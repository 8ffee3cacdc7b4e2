/* SPDX-License-Identifier: MIT */
/*
 * The runtime kit: executable copies of a trampoline template, one per JIT
 * function, handed out lock-free from arenas made ready ahead of demand.
 *
 * Layout.  An arena is one anonymous reservation [guard][slots][guard]: the
 * two guard pages stay PROT_NONE for the arena's life, so the kernel never
 * merges the slots with a neighbouring executable mapping (a merge of two
 * arenas would report one mmap event covering both, and perf would drop
 * the loads of the older one).  Every copy has the same executable bytes,
 * so the slots are normally the set's image -- a sealed memfd written once
 * by jitring_trampolines_new() -- mapped PROT_READ|PROT_EXEC over the
 * middle of the reservation: no memory of its own, never writable.  An
 * image that is a whole number of slots (and pages) is mapped
 * JR_TRAMP_IMAGE_MAPS times back to back, one run of slots 16 times as
 * long for the same memory, so a storm switches arenas 16 times less
 * often and the default stock covers 1.7 million copies; the
 * kernel does not merge those mappings (each starts at offset 0 of the
 * file), so each is one mmap event for perf.  Where
 * an executable memfd is refused, the slots are written while
 * PROT_READ|PROT_WRITE, the instruction cache is synchronised, and they are
 * switched to PROT_READ|PROT_EXEC once, before any copy in them is handed
 * out.  Either way they are never written, remapped or re-protected while
 * copies are out (W^X).
 * With JITRING_F_TRAMPOLINE_ELF the arenas are pieces of one ELF file in
 * the dump's directory (elf_make(), src/format/elf_image.c), so that
 * perf unwinds through the copies without perf inject: the set reserves
 * the object's whole span once and maps its unwind tables there; arena k
 * (claimed by a fetch_add of elf_next) has its tables written to the file
 * and its place mapped MAP_PRIVATE over its own place in the span, never
 * twice, its slots written into that private memory and then switched to
 * read-execute, as above (the file's .text stays a hole: elf_arena()), so
 * every mapping keeps the object's layout (perf's unwinder places the
 * tables from the lowest mapping of the file).  Such arenas are kept when the
 * stock shrinks (their place in the file is taken for good); past the
 * file's room, or after a failed write, arenas are written anonymous.
 * A slot is jitring_trampoline_slot_size() bytes, 16-aligned and large enough
 * for perf's extended mapping of the copy, [addr, addr + ALIGN_8(code_size)
 * + mapped_size), so no copy lies inside another one's mapping (96 bytes
 * for the built-in x86_64 template: 16 bytes of code and salt room + 80 of
 * unwind data).  An arena has at least 64 KiB and 32 slots.
 *
 * Hand-out.  A set has a current arena (cur) and up to JR_TRAMP_READY_CAP
 * ready ones in an array of pointer cells.
 *   get:     a = cur (acquire); i = fetch_add(a->next, 1) (relaxed);
 *            i < a->nslots: the copy is slot i, ours alone.  Else advance.
 *   succ:    the current arena's successor, linked ahead (a CAS of
 *            a->succ from NULL, release) by the thread that installed a
 *            and by the flusher each round, taken from the ready array.
 *   advance: if a->succ (acquire) is an arena, every thread that got here
 *            CASes cur from a to it (release): one wins, no one waits.
 *            The winner exchanges a->succ with DEAD (acquire) and parks
 *            back an arena it finds there other than the one installed,
 *            then links the new arena's successor.  Otherwise (the stock
 *            ran dry, or the mutex engine):
 *            the first thread to flag the exhausted arena (an exchange on
 *            a->switching) takes a ready arena (exchange of a cell to NULL,
 *            acquire), or makes one itself if none is ready (counted in
 *            trampoline_arenas_waited), then CASes cur from the exhausted arena
 *            to it (release).  Threads that find the flag set wait for cur
 *            to move, asleep on a futex the switcher wakes, at most
 *            TR_SWITCH_WAIT_NS (a flagger preempted, or lost in a fork),
 *            then do the same themselves; the loser of
 *            the CAS parks its arena in the ready array and every thread
 *            retries on whichever arena won.  Without the flag, a crowd of
 *            threads that ran out together would each take an arena and
 *            park all but one back, draining the array under the flusher.
 *   ready:   the flusher (sets_maintain(), once per round) and
 *            losers put arenas in with a CAS of an empty cell (release);
 *            takers exchange a cell with NULL (acquire).  An arena taken
 *            by two threads is impossible: the exchange hands each value
 *            to exactly one of them.
 * So the steady-state cost of a copy is one relaxed fetch_add on the
 * arena's counter, one jitring_write() and one relaxed fetch_add on the
 * writer's trampoline_copies counter; mmap and mprotect run on the
 * flusher, which keeps at least `want` arenas ready per set and is woken
 * when a taker leaves fewer than that.  `want` starts at its floor (10 for
 * 16-fold image arenas, else 2, or what ready_copies asks, at least 2)
 * and doubles whenever a caller had to make an arena or took the last
 * ready one (demand outran the flusher): up to 16, and on up to
 * JR_TRAMP_READY_CAP / 2 with an image mapped once per arena (its arenas
 * cost no memory); written arenas instead grow their slots (want_grow()).
 * The flusher also keeps twice the arenas taken per window, and once
 * takes stop it brings `want` back to the floor and unmaps the ready
 * arenas above it (stock_size()): an arena in the ready array never had a
 * copy handed out, and the flusher's take makes it the flusher's alone.
 *
 * Invariants: cur never goes back to an arena it left (only fresh arenas
 * are ever installed, so the CAS has no ABA); an installed arena is never
 * in the ready array again; an arena is in at most one place: a ready
 * cell, one arena's succ, or cur (a link to a retired arena fails on DEAD
 * and the linker parks the arena back; between the CAS that installs a
 * successor and the exchange that retires its link, it is both cur and
 * the old arena's succ, and every other CAS from the old arena fails);
 * every slot index below nslots is claimed by exactly one fetch_add;
 * nready >= the number of filled cells (it is raised before a put and
 * lowered after a take), so nready == 0 proves the array empty; every
 * arena made is on the set's `all` list until jitring_trampolines_free().
 *
 * Ordering: the maker's writes to the slots and the arena header happen
 * before its release CAS into a ready cell (or into cur); a taker's acquire
 * exchange, then its release CAS of cur, then every getter's acquire load
 * of cur extend that to the threads that run the copies.  On x86_64 the
 * mprotect's TLB shootdown serialises other cores; elsewhere
 * __builtin___clear_cache() does the cache maintenance before publication.
 * Sets are pushed on jr->trampoline_sets with an acq_rel CAS and read by
 * the flusher from a seq_cst load of the head; `next` links are immutable
 * while the writer is open.
 *
 * Waking the flusher (the engine's kick, engine_ops.h) only touches the
 * handle's ops and sleep word (never freed), so no jitring_enter() is
 * needed on the get path.  No wake is
 * missed: a take lowers nready seq_cst and then reads the sleep word
 * seq_cst; jitring_trampolines_new() pushes its set, fences seq_cst and
 * reads the sleep word; the flusher stores its sleep mode seq_cst and then
 * checks every set's nready against its mark (sets_wanted(),
 * seq_cst loads).  The mutex engine has no background thread:
 * jitring_trampolines_new() makes the first arena and each later one is
 * made by the get() that exhausted the previous one
 * (trampoline_arenas_waited).
 *
 * Close and fork: the set and its arenas do not depend on the engine state,
 * so a get() racing jitring_close() touches only memory that stays valid
 * (the handle is a tombstone, the set lives until jitring_trampolines_free())
 * and ends with -ESHUTDOWN from its own state check or jitring_write().  A
 * fork child inherits the arenas (same addresses, still mapped) and keeps
 * handing out copies from them into its own dump; its salt key is redrawn
 * so its dumped bytes differ from the parent's.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/demand.h"
#include "common/futex.h"
#include "common/testpoint.h"
#include "core/internal.h"
#include "engines/engine.h"
#include "format/cfi_presets.h"
#include "format/elf_image.h"
#include "format/record.h"
#include "trampolines.h"

_Static_assert(JITRING_TRAMPOLINE_TEMPLATE_SIZE_V1 ==
		       offsetof(struct jitring_trampoline_template, reserved) +
			       sizeof(uint32_t),
	       "struct jitring_trampoline_template v1 is frozen");
/* How long a caller waits for another one's arena switch. */
#define TR_SWITCH_WAIT_NS (100 * 1000000ull)

struct tr_arena {
	/* Claimed slots; may run past nslots once exhausted. */
	alignas(JITRING_CACHELINE) _Atomic uint64_t next;
	_Atomic uint32_t switching; /* a thread is replacing this arena */
	/* The arena that follows, linked ahead (see "succ" above). */
	_Atomic(struct tr_arena *) succ;

	/* Immutable once published. */
	alignas(JITRING_CACHELINE) uint8_t *base; /* slot 0 */
	uint64_t nslots;
	void *map; /* the mapping, guards included */
	size_t map_len;
	struct tr_arena *all_next; /* the set's `all` list */
	/* The set's `installed` list: set before the push, then immutable. */
	struct tr_arena *inst_next;
};

struct jitring_trampolines {
	/* The writer: changed only by jitring_trampolines_rebind(), once
	 * the one before is closed; read it through tr_writer(). */
	alignas(JITRING_CACHELINE) _Atomic(struct jitring *) jr;
	/* Immutable after jitring_trampolines_new(). */
	uint8_t *code;     /* the template's bytes */
	uint8_t *eh_frame; /* built once for every copy, or NULL */
	uint32_t code_size;
	uint32_t salt_offset;
	uint32_t eh_frame_size;
	uint32_t slot_size;
	uint64_t nslots; /* per arena, as first made */
	/* Bytes of slots new arenas get: grows under demand (want_grow()). */
	_Atomic size_t slots_len;
	/*
	 * The arena image: a sealed memfd holding a run of slots, filled
	 * once.  Every arena then maps it read-execute at its own address,
	 * image_maps times back to back, so an arena costs one system call
	 * more than that and no memory of its own (the copies are identical
	 * bytes; the salt goes only into the dump).
	 * -1 where that is not allowed: arenas are then written one by one.
	 */
	int image;
	size_t image_len;    /* bytes of the image */
	uint32_t image_maps; /* times an arena maps it, back to back */
	/*
	 * JITRING_F_TRAMPOLINE_ELF: the arenas' ELF file (see elf_make()),
	 * or -1.  Arena k maps the file's arena k at elf_span + k *
	 * arena_len, claimed by a fetch_add of elf_next; the unwind tables
	 * are mapped once, at their place after the arenas' room.
	 */
	int elf_fd;
	struct jitring_elf_image elf;
	uint8_t *elf_span;   /* the object's .text */
	size_t elf_span_len; /* .text to the tables' end */
	uint8_t *elf_map;    /* the reservation: a guard page, the object from
			   * address 0 (its base), a guard page */
	size_t elf_map_len;
	_Atomic uint32_t elf_next;
	size_t page;
	uint64_t serial; /* set number, mixed into the salt */
	/* The copies' group, planned (and its eh_frame checked) once. */
	struct jitring_group group;
	/* jr->trampoline_sets: written before the push, changed only once closed. */
	struct jitring_trampolines *next;

	/* The arena copies are carved from. */
	alignas(JITRING_CACHELINE) _Atomic(struct tr_arena *) cur;
	_Atomic uint32_t switched; /* futex: bumped when cur moves */

	/* Ready arenas and the low-water mark. */
	alignas(JITRING_CACHELINE) _Atomic int32_t nready;
	_Atomic uint32_t want;
	_Atomic uint32_t taken;         /* getters' takes since the flusher
					 * last looked (the demand) */
	_Atomic(struct tr_arena *) all; /* every arena made */
	/* Every arena that was ever cur (copies were handed out of it only):
	 * pushed, never unlinked until the set is freed. */
	_Atomic(struct tr_arena *) installed;
	_Atomic uint64_t
		reuses; /* descriptions by jitring_trampolines_reuse() */
	/* Flusher-private: the demand, in arenas taken per window. */
	bool warned;
	uint32_t want_floor; /* never fewer ready: the default or ready_copies */
	uint32_t want_default; /* the floor without ready_copies */
	struct jr_demand demand;
	_Atomic(struct tr_arena *) ready[JR_TRAMP_READY_CAP];
};

/*
 * The set's writer.  Acquire: pairs with the release store in
 * jitring_trampolines_rebind(), so a caller that sees a new writer sees its
 * handle complete.
 */
static inline struct jitring *tr_writer(const struct jitring_trampolines *t)
{
	return atomic_load_explicit(&((struct jitring_trampolines *)t)->jr,
				    memory_order_acquire);
}

/* ------------------------------------------------------------------ */
/* Salts.                                                               */

static pthread_once_t tr_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t tr_key;    /* per process, redrawn after fork */
static _Atomic uint64_t tr_serial; /* sets made in this process */

static void tr_rekey(void)
{
	uint64_t k = 0;

	if (getrandom(&k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k))
		k = jitring_clock_ns() ^ (uintptr_t)&k;
	k ^= atomic_load_explicit(&tr_key, memory_order_relaxed);
	k ^= (uint64_t)getpid() << 32;
	atomic_store_explicit(&tr_key, jr_mix64(k), memory_order_relaxed);
}

static void tr_init(void)
{
	tr_rekey();
	/* The child's dumped bytes must differ from the parent's. */
	pthread_atfork(NULL, NULL, tr_rekey);
}

/*
 * The 8-byte salt of the copy at @code, described for the @gen-th time by
 * jitring_trampolines_reuse() (0: by get()): for get() distinct for every
 * (set, address) pair of the process while addresses stay below 2^48 and
 * fewer than 65536 sets are made, because jr_mix64() is a bijection; a
 * reuse's is mixed once more with its generation, so the same address
 * described again under another name never repeats its earlier bytes (but
 * with odds of 2^-64).
 */
static uint64_t salt_of(const struct jitring_trampolines *t, const void *code,
			uint64_t gen)
{
	uint64_t v = (uint64_t)(uintptr_t)code ^ (t->serial << 48);
	uint64_t s = jr_mix64(
		v ^ atomic_load_explicit(&tr_key, memory_order_relaxed));

	return gen ? jr_mix64(s + gen) : s;
}

/* ------------------------------------------------------------------ */
/* The built-in template.                                               */

#if defined(__x86_64__)
/* jitring_trampoline_x86_64[] then 8 bytes of salt room (int3, never run). */
/* clang-format off */
static const unsigned char builtin_code[] = {
	JR_TRAMPOLINE_X86_64_CODE,
	0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc,
};
/* clang-format on */
#define BUILTIN_SALT 8u
#define ARENA_FILL 0xcc /* int3 between copies */
#elif defined(__aarch64__)
/* jitring_trampoline_aarch64[] then 8 bytes of salt room (brk #0, never run). */
/* clang-format off */
static const unsigned char builtin_code[] = {
	JR_TRAMPOLINE_AARCH64_CODE,
	0x00, 0x00, 0x20, 0xd4, 0x00, 0x00, 0x20, 0xd4,
};
/* clang-format on */
#define BUILTIN_SALT 20u
#define ARENA_FILL 0x00 /* udf #0 between copies */
#else
#define ARENA_FILL 0x00
#endif

int jitring_trampoline_builtin(struct jitring_trampoline_template *t)
{
	if (!t)
		return -EINVAL;
#if defined(__x86_64__) || defined(__aarch64__)
	memset(t, 0, sizeof(*t));
	t->struct_size = sizeof(*t);
	t->code_size = sizeof(builtin_code);
	t->code = builtin_code;
	t->cfi = jitring_cfi_preset(JITRING_CFI_HOST_FP_TRAMPOLINE);
	t->salt_offset = BUILTIN_SALT;
	return 0;
#else
	return -EOPNOTSUPP;
#endif
}

/* ------------------------------------------------------------------ */
/* Arenas.                                                              */

/* @len bytes of slots at @p: the template in each, the fill between. */
static void slots_fill(const struct jitring_trampolines *t, uint8_t *p,
		       size_t len)
{
	if (ARENA_FILL)
		memset(p, ARENA_FILL, len);
	for (uint64_t i = 0; i < len / t->slot_size; i++)
		memcpy(p + i * t->slot_size, t->code, t->code_size);
}

/* Write all of @len bytes at @off of @fd.  Return: 0 or -errno. */
static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!n)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/*
 * @len bytes of slots at @p, writable and faulted in: filled with the
 * template, the instruction cache synchronised, then read-execute for
 * good.  Return: 0 or -errno of mprotect(2).
 */
static int slots_seal(struct jitring_trampolines *t, uint8_t *p, size_t len)
{
	slots_fill(t, p, len);
	__builtin___clear_cache((char *)p, (char *)p + len);
	return mprotect(p, len, PROT_READ | PROT_EXEC) ? -errno : 0;
}

/* @len bytes at @p inside the ELF span back to a reserved hole, so that
 * nothing else is mapped where perf's unwinder expects the object. */
static void span_hole(uint8_t *p, size_t len)
{
	mmap(p, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

/*
 * An arena's private mapping @p of the file: faulted in at once as
 * private memory, the slots written, read-execute.  The faults read the
 * file's hole first, and on a file system whose holes take memory (tmpfs,
 * when full) that read fails; MADV_POPULATE_WRITE reports it, where
 * touching the pages would raise SIGBUS.  So without it (older headers, or
 * a kernel before 5.14: EINVAL) nothing is faulted here, and the caller
 * writes the slots to the file instead.
 * Return: 0, or -errno (@p is left as it is).
 */
static int elf_arena_private(struct jitring_trampolines *t, uint8_t *p,
			     size_t len)
{
#ifdef MADV_POPULATE_WRITE
	if (JITRING_FAULT(tramp_elf_populate, t))
		return -EFAULT;
	if (madvise(p, len, MADV_POPULATE_WRITE))
		return -errno;
	return slots_seal(t, p, len);
#else
	(void)t;
	(void)p;
	(void)len;
	return -EOPNOTSUPP;
#endif
}

/*
 * Arena @k of the ELF file: its FDEs and search-table rows written (the
 * same bytes whoever writes them: elf_image.c), then its place in the file
 * mapped private and writable over its place in the span, the slots
 * written into that private memory, and the mapping switched to
 * read-execute once (elf_arena_private()), into *@base.  The file's .text
 * stays a hole: perf's unwinder reads only the tables, and it learns the
 * mapping (file and offset) from the mprotect(), which the kernel reports
 * as an executable mmap; so a process's file holds its tables and no code
 * (an arena's slots would be 64 KiB of disk each, written whether used or
 * not).  Where that fails, the slots are written to the file and mapped
 * read-execute from it instead.
 * Return: 0 or -errno of pwrite(2)/mmap(2) (-ENOMEM if malloc fails); the
 * arena's place is then a reserved hole again.
 */
static int elf_arena(struct jitring_trampolines *t, uint32_t k, uint8_t **base)
{
	const struct jitring_elf_image *im = &t->elf;
	size_t fdes = im->arena_slots * im->fde_size,
	       rows = im->arena_slots * 8;
	uint64_t off = im->text_off + (uint64_t)k * im->arena_len;
	uint8_t *buf = malloc(fdes + rows), *p;
	int ret;

	if (!buf)
		return -ENOMEM;
	jitring_elf_image_fdes(im, k, buf);
	jitring_elf_image_rows(im, k, buf + fdes);
	ret = pwrite_all(t->elf_fd, buf, fdes,
			 jitring_elf_image_fde_off(im, k));
	if (!ret)
		ret = pwrite_all(t->elf_fd, buf + fdes, rows,
				 jitring_elf_image_rows_off(im, k));
	free(buf);
	if (ret)
		return ret;
	p = t->elf_span + (off - im->text_off);
	if (mmap(p, im->arena_len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_FIXED, t->elf_fd,
		 (off_t)off) == MAP_FAILED) {
		ret = -errno;
		span_hole(p, im->arena_len);
		return ret;
	}
	if (!elf_arena_private(t, p, im->arena_len)) {
		*base = p;
		return 0;
	}
	buf = malloc(im->arena_len);
	ret = buf ? 0 : -ENOMEM;
	if (buf) {
		slots_fill(t, buf, im->arena_len);
		ret = pwrite_all(t->elf_fd, buf, im->arena_len, off);
		free(buf);
	}
	if (!ret &&
	    mmap(p, im->arena_len, PROT_READ | PROT_EXEC,
		 MAP_PRIVATE | MAP_FIXED, t->elf_fd, (off_t)off) == MAP_FAILED)
		ret = -errno;
	if (ret) {
		span_hole(p, im->arena_len);
		return ret;
	}
	*base = p;
	return 0;
}

/* Give arena @a's memory back (a ready arena: no copy handed out). */
static void arena_unmap(struct jitring_trampolines *t, struct tr_arena *a)
{
	if (t->elf_span && a->map >= (void *)t->elf_span &&
	    (uint8_t *)a->map < t->elf_span + t->elf_span_len) {
		span_hole(a->map, a->map_len);
		return;
	}
	munmap(a->map, a->map_len);
}

/*
 * Map, fill and seal one arena, and put it on the set's `all` list.  Any
 * thread; makes system calls.
 * Return: 0 or -errno of mmap(2)/mprotect(2) (-ENOMEM if malloc fails).
 */
static int arena_make(struct jitring_trampolines *t, struct tr_arena **out)
{
	struct tr_arena *a, *head;
	uint8_t *map, *base;
	int ret;

	size_t slots_len =
		atomic_load_explicit(&t->slots_len, memory_order_relaxed);
	size_t map_len = slots_len + 2 * t->page;
	uint64_t nslots = slots_len / t->slot_size;

	a = aligned_alloc(JITRING_CACHELINE, sizeof(*a));
	if (!a)
		return -ENOMEM;
	map = mmap(NULL, map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		   0);
	if (map == MAP_FAILED) {
		ret = -errno;
		goto err_free;
	}
	base = map + t->page;
	if (t->elf_fd >= 0) {
		uint32_t k = atomic_fetch_add_explicit(&t->elf_next, 1,
						       memory_order_relaxed);

		/* Past the file's room: an anonymous arena (no unwind
		 * tables for perf: those frames end its stacks). */
		if (k < t->elf.arenas) {
			uint8_t *p = NULL;

			if (!elf_arena(t, k, &p)) {
				munmap(map, map_len);
				base = map = p;
				map_len = t->elf.arena_len;
				nslots = t->elf.arena_slots;
				goto publish;
			}
			/* A hole in the search table (arena k's rows
			 * unwritten) would hide every later arena from
			 * an unwinder's binary search: the file takes no
			 * more arenas. */
			atomic_store_explicit(&t->elf_next, t->elf.arenas,
					      memory_order_relaxed);
		}
	}
	if (t->image >= 0) {
		/* The image over the middle of the reservation, image_maps
		 * times: one run of slots (a whole number in each image, see
		 * jitring_trampoline_image_len()).  slots_len is image_len *
		 * image_maps: image arenas never grow (want_grow()). */
		for (uint32_t k = 0; k < t->image_maps; k++)
			if (mmap(base + (size_t)k * t->image_len, t->image_len,
				 PROT_READ | PROT_EXEC, MAP_SHARED | MAP_FIXED,
				 t->image, 0) == MAP_FAILED) {
				ret = -errno;
				goto err_unmap;
			}
		goto publish;
	}
	if (mprotect(base, slots_len, PROT_READ | PROT_WRITE)) {
		ret = -errno;
		goto err_unmap;
	}
	/* Every page is written below: fault them in at once. */
	jitring_prefault(base, slots_len);
	ret = slots_seal(t, base, slots_len);
	if (ret)
		goto err_unmap;

publish:
	atomic_init(&a->next, 0);
	atomic_init(&a->switching, 0);
	atomic_init(&a->succ, NULL);
	a->base = base;
	a->nslots = nslots;
	a->map = map;
	a->map_len = map_len;
	head = atomic_load_explicit(&t->all, memory_order_relaxed);
	do {
		a->all_next = head;
		/* Pairs with the acquire load in arena_unlink(): the flusher
		 * reads all_next of arenas other threads pushed. */
	} while (!atomic_compare_exchange_weak_explicit(
		&t->all, &head, a, memory_order_release, memory_order_relaxed));
	*out = a;
	return 0;

err_unmap:
	munmap(map, map_len);
err_free:
	free(a);
	return ret;
}

/* Park @a in an empty ready cell.  Return: false if every cell is full. */
static bool ready_put(struct jitring_trampolines *t, struct tr_arena *a)
{
	/* Raised first: nready never undercounts the filled cells. */
	atomic_fetch_add_explicit(&t->nready, 1, memory_order_relaxed);
	for (uint32_t i = 0; i < JR_TRAMP_READY_CAP; i++) {
		struct tr_arena *none = NULL;

		/* Pairs with the acquire exchange in ready_take(): the taker
		 * sees the arena's slots and header. */
		if (atomic_compare_exchange_strong_explicit(
			    &t->ready[i], &none, a, memory_order_release,
			    memory_order_relaxed))
			return true;
	}
	atomic_fetch_sub_explicit(&t->nready, 1, memory_order_relaxed);
	return false;
}

static struct tr_arena *ready_take(struct jitring_trampolines *t)
{
	if (atomic_load_explicit(&t->nready, memory_order_relaxed) <= 0)
		return NULL;
	for (uint32_t i = 0; i < JR_TRAMP_READY_CAP; i++) {
		struct tr_arena *a;

		if (!atomic_load_explicit(&t->ready[i], memory_order_relaxed))
			continue;
		/* Pairs with the release CAS in ready_put(). */
		a = atomic_exchange_explicit(&t->ready[i], NULL,
					     memory_order_acquire);
		if (a) {
			/*
			 * seq_cst: with the seq_cst load of jr->sleep in
			 * wake_flusher() this is a Dekker pair with the
			 * flusher, which stores its sleep mode and then reads
			 * nready (sets_wanted()): no missed refill.
			 */
			atomic_fetch_sub_explicit(&t->nready, 1,
						  memory_order_seq_cst);
			return a;
		}
	}
	return NULL;
}

static void wake_flusher(struct jitring_trampolines *t)
{
	struct jitring *jr = tr_writer(t);

	/* The kick reads only the handle: valid even after close. */
	jitring_engine_kick(jr);
}

/*
 * The most ready arenas demand may ask for: JR_TRAMP_WANT_MAX, and
 * JR_TRAMP_READY_CAP / 2 for small arenas that cost no memory (an image
 * mapped once) with a flusher to make them.  16 arenas of 16 mappings of
 * the tiled image are already 2,785,280 copies of the built-in template,
 * and more would only hold mmap_lock against a storm's page faults;
 * written arenas hold memory and grow instead (want_grow()).
 */
static uint32_t want_cap(const struct jitring_trampolines *t)
{
	return tr_writer(t)->engine == JITRING_ENGINE_RINGS && t->image >= 0 &&
			       t->image_maps == 1 ?
		       JR_TRAMP_READY_CAP / 2 :
		       JR_TRAMP_WANT_MAX;
}

/*
 * Demand outran the flusher: double the low-water mark (once per @seen),
 * up to want_cap(); at the cap, double the size of new written arenas
 * instead (fewer arenas to make and switch to for the same copies, the
 * same bytes).
 */
static void want_grow(struct jitring_trampolines *t, uint32_t seen)
{
	uint32_t cap = want_cap(t);
	size_t len;

	if (seen < cap) {
		atomic_compare_exchange_strong_explicit(
			&t->want, &seen, seen * 2 < cap ? seen * 2 : cap,
			memory_order_relaxed, memory_order_relaxed);
		return;
	}
	/* No flusher (mutex engine): callers make every arena anyway.  An
	 * image's arenas have a fixed size. */
	if (tr_writer(t)->engine != JITRING_ENGINE_RINGS || t->image >= 0 ||
	    t->elf_fd >= 0)
		return;
	len = atomic_load_explicit(&t->slots_len, memory_order_relaxed);
	/* Twice the bytes per arena, half as many kept ready: the ready
	 * stock's memory stays what it was, refilled in fewer steps. */
	if (len < JR_TRAMP_ARENA_MAX &&
	    atomic_compare_exchange_strong_explicit(
		    &t->slots_len, &len, len * 2, memory_order_relaxed,
		    memory_order_relaxed))
		atomic_store_explicit(&t->want, JR_TRAMP_WANT_MAX / 2,
				      memory_order_relaxed);
}

/*
 * Take a ready arena (NULL if none).  A getter's take (@getter) also asks
 * for more when the stock runs low: it wakes the flusher below the mark,
 * and raises the mark when it took the last one or found none (demand
 * outran the flusher).  The flusher's own takes do neither.
 */
static struct tr_arena *stock_take(struct jitring_trampolines *t, bool getter)
{
	uint32_t want = atomic_load_explicit(&t->want, memory_order_relaxed);
	struct tr_arena *a = ready_take(t);
	int32_t left;

	if (!getter)
		return a;
	/* The demand (an empty take too: its caller makes the arena). */
	atomic_fetch_add_explicit(&t->taken, 1, memory_order_relaxed);
	left = atomic_load_explicit(&t->nready, memory_order_relaxed);
	if (left <= 0)
		want_grow(t, want);
	if (left < (int32_t)want)
		wake_flusher(t);
	return a;
}

/*
 * @a becomes cur (the thread whose CAS or init installed it): copies are
 * handed out of it from now on, so jitring_trampolines_reuse() must find it.
 */
static void installed_push(struct jitring_trampolines *t, struct tr_arena *a)
{
	struct tr_arena *head =
		atomic_load_explicit(&t->installed, memory_order_relaxed);

	do {
		a->inst_next = head;
		/* Pairs with the acquire load in handed_out(): inst_next
		 * before the arena is on the list. */
	} while (!atomic_compare_exchange_weak_explicit(&t->installed, &head, a,
							memory_order_release,
							memory_order_relaxed));
}

/* succ of an arena that cur has left: no arena is linked to it any more. */
#define SUCC_DEAD ((struct tr_arena *)1)

/*
 * Link a ready arena as @a's successor if it has none, so that whichever
 * thread exhausts @a installs it with one CAS (arena_advance()).  Called
 * by the thread that installed @a and by the flusher.  A lost race (or an
 * @a already left) parks the arena back.
 */
static void succ_link(struct jitring_trampolines *t, struct tr_arena *a,
		      bool getter)
{
	struct tr_arena *none = NULL, *s;

	if (atomic_load_explicit(&a->succ, memory_order_relaxed))
		return;
	s = stock_take(t, getter);
	if (!s)
		return;
	JITRING_TESTPOINT(tramp_succ_link, t);
	/* Pairs with the acquire load of succ in arena_advance(): the
	 * installer sees the arena's header (ready_take() acquired it). */
	if (!atomic_compare_exchange_strong_explicit(&a->succ, &none, s,
						     memory_order_release,
						     memory_order_relaxed))
		ready_put(t, s);
}

/*
 * cur moved from @old to @n (our CAS): wake the threads waiting for the
 * switch, unlink @old's successor if it is not @n (it was linked after
 * we chose another arena: park it back), and link one for @n.
 */
static void switched_to(struct jitring_trampolines *t, struct tr_arena *old,
			struct tr_arena *n)
{
	struct tr_arena *s;

	installed_push(t, n);
	/* Wake the waiters in wait_switch() (they re-read cur). */
	atomic_fetch_add_explicit(&t->switched, 1, memory_order_relaxed);
	jr_futex_wake(&t->switched, INT_MAX);
	/* Acquire: pairs with the release CAS in succ_link(), for ready_put
	 * of an arena we never installed. */
	s = atomic_exchange_explicit(&old->succ, SUCC_DEAD,
				     memory_order_acquire);
	if (s && s != n && s != SUCC_DEAD)
		ready_put(t, s);
	succ_link(t, n, true);
}

/*
 * Another thread is switching from @old: wait for it rather than take or
 * make an arena too (a crowd of threads that ran out at the same moment
 * would otherwise each take one and park all but one back, draining the
 * ready array under the flusher).  Bounded, so a switcher that was
 * preempted, or that died with the parent of a fork, costs at most
 * TR_SWITCH_WAIT_NS.  Return: true once cur has moved on.
 */
static bool wait_switch(struct jitring_trampolines *t, struct tr_arena *old)
{
	uint64_t start = 0, now;

	for (unsigned int spins = 0;; spins++) {
		uint32_t seq = atomic_load_explicit(&t->switched,
						    memory_order_relaxed);
		struct timespec rel;

		if (atomic_load_explicit(&t->cur, memory_order_relaxed) != old)
			return true;
		if (spins < 64) {
			jr_cpu_relax();
			continue;
		}
		now = jitring_clock_ns();
		if (!start)
			start = now;
		else if (now - start > TR_SWITCH_WAIT_NS)
			return false;
		/*
		 * Sleep, not yield: in a storm hundreds of waiters yielding
		 * would take the CPU from the one thread making the arena.
		 * The switcher bumps switched after it installs cur and
		 * wakes us; a bump we missed makes the wait return at once.
		 */
		rel = jitring_clock_rel(TR_SWITCH_WAIT_NS - (now - start));
		jr_futex_wait(&t->switched, seq, &rel);
	}
}

/*
 * The current arena @old is used up: install the next one.  Return: 0 (the
 * caller reloads cur) or -ENOMEM if no arena could be had.
 */
static JR_NOINLINE int arena_advance(struct jitring_trampolines *t,
				     struct tr_arena *old)
{
	struct jitring *jr = tr_writer(t);
	struct tr_arena *n, *expect = old;

	/* Someone moved on already: use theirs. */
	if (atomic_load_explicit(&t->cur, memory_order_relaxed) != old)
		return 0;
	/*
	 * The successor linked ahead: every thread that gets here tries the
	 * same CAS, one wins, nobody waits for anybody.  Acquire pairs with
	 * the release CAS in succ_link().
	 */
	n = atomic_load_explicit(&old->succ, memory_order_acquire);
	if (n && n != SUCC_DEAD) {
		JITRING_TESTPOINT(tramp_succ_cas, t);
		/* Pairs with the acquire load of cur in get_copy(). */
		if (atomic_compare_exchange_strong_explicit(
			    &t->cur, &expect, n, memory_order_release,
			    memory_order_relaxed))
			switched_to(t, old, n);
		return 0;
	}
	/* None linked: the first to get here switches; the others wait. */
	if (atomic_exchange_explicit(&old->switching, 1,
				     memory_order_relaxed) &&
	    wait_switch(t, old))
		return 0;
	n = stock_take(t, true);
	if (!n) {
		int ret;

		/* Installed while we looked: no arena needed. */
		if (atomic_load_explicit(&t->cur, memory_order_relaxed) != old)
			return 0;
		ret = arena_make(t, &n);
		if (ret) {
			jitring_count(&jr->c.refused_nomem, 1);
			return -ENOMEM;
		}
		jitring_count(&jr->c.trampoline_arenas_waited, 1);
	}
	JITRING_TESTPOINT(tramp_slow_cas, t);
	/* Pairs with the acquire load of cur in get_copy(). */
	if (atomic_compare_exchange_strong_explicit(&t->cur, &expect, n,
						    memory_order_release,
						    memory_order_relaxed)) {
		switched_to(t, old, n);
		return 0;
	}
	/*
	 * Another thread installed an arena first.  Ours is fresh: park it
	 * for the next switch.  If the array is full (more racing threads
	 * than cells) it stays mapped, unused, until the set is freed.
	 */
	ready_put(t, n);
	return 0;
}

static bool sets_wanted(struct jitring *jr)
{
	/* Pairs with the acq_rel CAS that pushes a set; seq_cst: with the
	 * fence after that push, a Dekker pair with the flusher's store of
	 * its sleep mode (a new set is seen, or its maker wakes us). */
	for (struct jitring_trampolines *t = atomic_load_explicit(
		     &jr->trampoline_sets, memory_order_seq_cst);
	     t; t = t->next)
		/* Pairs with the seq_cst fetch_sub in ready_take().  A set
		 * whose arenas cannot be made (warned) must not keep the
		 * flusher from sleeping. */
		if (!t->warned &&
		    atomic_load_explicit(&t->nready, memory_order_seq_cst) <
			    (int32_t)atomic_load_explicit(&t->want,
							  memory_order_relaxed))
			return true;
	return false;
}

/*
 * Take arena @a, fresh from the ready array and ours alone, off the set's
 * `all` list (flusher).  Only the flusher unlinks; other threads push at
 * the head, so a node's link is the flusher's once it is not the head.
 */
static void arena_unlink(struct jitring_trampolines *t, struct tr_arena *a)
{
	/* Pairs with the release CAS in arena_make(). */
	struct tr_arena *p =
		atomic_load_explicit(&t->all, memory_order_acquire);

	if (p == a && atomic_compare_exchange_strong_explicit(
			      &t->all, &p, a->all_next, memory_order_acquire,
			      memory_order_acquire))
		return;
	while (p->all_next != a)
		p = p->all_next;
	p->all_next = a->all_next;
}

/*
 * Size the stock from the demand (flusher), as the ring pool is
 * (demand.h): twice the recent peak of arenas taken per window, never
 * below the floor (the default or ready_copies), at most want_cap().  Up
 * at once; down only at a window's end, as the peak decays, so a getter's
 * raise (want_grow(), when it outran the flusher) holds until then.  The
 * ready arenas above `want` are unmapped: a storm's stock is given back
 * within about a second.  Return: whether the stock is not yet at the
 * floor.
 */
static bool stock_size(struct jitring_trampolines *t, uint64_t now)
{
	uint32_t taken =
		atomic_exchange_explicit(&t->taken, 0, memory_order_relaxed);
	uint32_t want = atomic_load_explicit(&t->want, memory_order_relaxed);
	uint64_t since = t->demand.since;
	uint64_t w = 2 * (uint64_t)jr_demand_peak(&t->demand, taken, now);
	uint32_t cap = want_cap(t);
	struct tr_arena *a;

	if (w > cap)
		w = cap;
	if (w < t->want_floor)
		w = t->want_floor;
	if (w > want || t->demand.since != since)
		want = (uint32_t)w;
	/* A getter's want_grow() between our load and this store is lost:
	 * a hint, raised again by the next take that finds the stock low. */
	atomic_store_explicit(&t->want, want, memory_order_relaxed);
	/* An ELF file's arenas are kept: each took its place in the file
	 * for good, and one given back would be written anew at the next
	 * demand (a burst's stock, over and over). */
	while (t->elf_fd < 0 &&
	       atomic_load_explicit(&t->nready, memory_order_relaxed) >
		       (int32_t)want &&
	       (a = ready_take(t))) {
		arena_unlink(t, a);
		arena_unmap(t, a);
		free(a);
	}
	return want > t->want_floor;
}

static uint64_t sets_maintain(struct jitring *jr, uint64_t now)
{
	struct jitring_trampolines *t;
	struct tr_arena *a;
	uint64_t again = UINT64_MAX;
	uint32_t added;
	int ret;

	/* Pairs with the acq_rel CAS that pushes a set in
	 * jitring_trampolines_new(). */
	for (t = atomic_load_explicit(&jr->trampoline_sets,
				      memory_order_acquire);
	     t; t = t->next) {
		uint32_t want;

		if (stock_size(t, now) && jr_demand_next(&t->demand) < again)
			again = jr_demand_next(&t->demand);
		want = atomic_load_explicit(&t->want, memory_order_relaxed);
		added = 0;
		/* Pairs with the release CAS of cur in arena_advance(). */
		succ_link(t,
			  atomic_load_explicit(&t->cur, memory_order_acquire),
			  false);
		while (atomic_load_explicit(&t->nready, memory_order_relaxed) <
		       (int32_t)want) {
			ret = arena_make(t, &a);
			if (ret) {
				if (!t->warned)
					jitring_log(jr, JITRING_LOG_WARNING,
						    "trampoline arena: %s",
						    strerror(-ret));
				t->warned = true;
				break;
			}
			if (!ready_put(t, a))
				break; /* full of parked arenas: enough */
			added++;
		}
		if (added)
			jitring_count(&jr->c.trampoline_arenas_ahead, added);
	}
	return again;
}

/* ------------------------------------------------------------------ */
/* Sets.                                                                */

static void set_destroy(struct jitring_trampolines *t)
{
	struct tr_arena *a, *n;

	for (a = atomic_load_explicit(&t->all, memory_order_relaxed); a;
	     a = n) {
		n = a->all_next;
		if (!t->elf_span)
			munmap(a->map, a->map_len);
		free(a);
	}
	if (t->elf_map)
		munmap(t->elf_map, t->elf_map_len);
	if (t->elf_fd >= 0)
		close(t->elf_fd);
	if (t->image >= 0)
		close(t->image);
	free(t->code);
	free(t->eh_frame);
	free(t);
}

/*
 * The arena image (see struct jitring_trampolines): a memfd of @len bytes
 * holding every slot's copy and the fill between them, sealed against any
 * change once written, and checked to map read-execute (a system that
 * forbids executable memfds gets -1: anonymous arenas then).
 */
static int image_make(const struct jitring_trampolines *t, size_t len)
{
	uint8_t *p;
	int fd = (int)syscall(SYS_memfd_create, "jitring-trampolines",
			      MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)len))
		goto err;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto err;
	slots_fill(t, p, len);
	munmap(p, len);
	if (fcntl(fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL))
		goto err;
	p = mmap(NULL, len, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto err;
	munmap(p, len);
	return fd;
err:
	close(fd);
	return -1;
}

/* Arenas an ELF file has room for: 64 MiB of slots (698,368 copies of the
 * built-in template), a 92 MiB sparse file of which each arena made
 * takes 27 KiB (its tables; 92 KiB where its slots are written too). */
#define TR_ELF_ARENAS 1024u

/*
 * JITRING_F_TRAMPOLINE_ELF: the arenas' ELF file (elf_image.c) in @dir,
 * the dump's directory: made new (O_EXCL, never through a link) with a
 * name no one else's, checked by fstat(2) to be the regular file we made
 * in a directory only we (or root) can write, laid out, and its unwind
 * tables mapped read-execute at their place in a reserved span.  Arenas
 * are then written and mapped one by one (elf_arena()).  The file stays
 * when the set goes: perf reads it when the recording is finished.
 * Return: 0, or -errno (the caller uses the memfd image instead).
 */
static int elf_make(struct jitring_trampolines *t, const char *dir,
		    size_t arena_len)
{
	struct jitring_elf_image *im = &t->elf;
	struct stat st;
	uint8_t *buf, *span;
	size_t len;
	uint64_t rnd = 0;
	char name[64];
	int dfd, fd, ret;

	memset(im, 0, sizeof(*im));
	im->slot_size = t->slot_size;
	im->code_size = t->code_size;
	im->eh_frame = t->eh_frame;
	im->eh_frame_size = t->eh_frame_size;
	im->page = (uint32_t)t->page;
	im->arena_len = arena_len;
	im->arenas = TR_ELF_ARENAS;
	if (!t->eh_frame || jitring_elf_image_plan(im))
		return -EINVAL;
	dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	if (fstat(dfd, &st) || (st.st_uid != geteuid() && st.st_uid != 0) ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		close(dfd);
		return -EPERM;
	}
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		rnd = jr_mix64(jitring_clock_ns() ^ (uintptr_t)t);
	snprintf(name, sizeof(name), "jitring-tramp-%d-%016llx.so",
		 (int)getpid(), (unsigned long long)rnd);
	fd = openat(dfd, name,
		    O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC |
			    O_NOCTTY,
		    0700);
	close(dfd);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    st.st_nlink != 1) {
		ret = -EPERM;
		goto err_close;
	}
	len = im->text_off > im->size - im->str_off ? im->text_off :
						      im->size - im->str_off;
	buf = calloc(1, len);
	if (!buf) {
		ret = -ENOMEM;
		goto err_close;
	}
	ret = ftruncate(fd, (off_t)im->size) ? -errno : 0;
	if (!ret) {
		jitring_elf_image_head(im, buf);
		ret = pwrite_all(fd, buf, im->text_off, 0);
	}
	if (!ret)
		ret = pwrite_all(fd, jitring_elf_image_cie(im), im->cie_size,
				 im->eh_off);
	if (!ret) {
		jitring_elf_image_hdr(im, buf);
		ret = pwrite_all(fd, buf, JR_ELF_HDR_FIXED, im->hdr_off);
	}
	if (!ret) {
		jitring_elf_image_tail(im, buf);
		ret = pwrite_all(fd, buf, im->size - im->str_off, im->str_off);
	}
	free(buf);
	if (ret)
		goto err_close;
	t->elf_span_len = im->unwind_off + im->unwind_len - im->text_off;
	t->elf_map_len = im->unwind_off + im->unwind_len + 2 * t->page;
	span = mmap(NULL, t->elf_map_len, PROT_NONE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (span == MAP_FAILED) {
		ret = -errno;
		goto err_close;
	}
	/*
	 * The headers at the object's base (perf takes the base from the
	 * lowest mapping of the file) and the tables at their place, both
	 * read-execute so that perf records them.
	 */
	if (mmap(span + t->page, im->text_off, PROT_READ | PROT_EXEC,
		 MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED ||
	    mmap(span + t->page + im->unwind_off, im->unwind_len,
		 PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd,
		 (off_t)im->unwind_off) == MAP_FAILED) {
		ret = -errno;
		munmap(span, t->elf_map_len);
		goto err_close;
	}
	t->elf_map = span;
	t->elf_span = span + t->page + im->text_off;
	t->elf_fd = fd;
	atomic_init(&t->elf_next, 0);
	return 0;

err_close:
	close(fd);
	/* Ours, and of no use now. */
	dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		unlinkat(dfd, name, 0);
		close(dfd);
	}
	return ret;
}

static int template_check(const struct jitring_trampoline_template *ut,
			  struct jitring_trampoline_template *tp, int *eh_size)
{
	int ret = jitring_struct_in(tp, sizeof(*tp), ut, ut->struct_size,
				    JITRING_TRAMPOLINE_TEMPLATE_SIZE_V1);

	if (ret)
		return ret;
	if (!tp->code || !tp->code_size ||
	    tp->code_size > JITRING_TRAMPOLINE_MAX || tp->reserved)
		return -EINVAL;
	if (tp->salt_offset != JITRING_TRAMPOLINE_NO_SALT &&
	    (tp->code_size >= JR_TRAMP_SALT_SIZE ?
		     tp->salt_offset > tp->code_size - JR_TRAMP_SALT_SIZE :
		     tp->salt_offset != 0))
		return -EINVAL;
	*eh_size = 0;
	if (tp->cfi) {
		*eh_size =
			jitring_eh_frame_build(tp->cfi, tp->code_size, NULL, 0);
		if (*eh_size <= 0)
			return -EINVAL;
	}
	return 0;
}

/* The ready arenas of @len bytes of slots that hold @stock bytes of
 * copies, and one more (cur is not counted as ready). */
static uint32_t stock_floor(uint64_t stock, size_t len)
{
	uint64_t want = (stock + len - 1) / len + 1;

	if (want < JR_TRAMP_WANT_INIT)
		want = JR_TRAMP_WANT_INIT;
	if (want > JR_TRAMP_READY_CAP / 2)
		want = JR_TRAMP_READY_CAP / 2;
	return (uint32_t)want;
}

/*
 * Put @t, complete, on @jr's list of sets, where its flusher keeps its
 * stock.  Inside the cold-path bracket: once close has drained the users,
 * no set appears on the list any more.
 * Return: 0, or -ESHUTDOWN (-EBADF) once @jr is closing.
 */
static int set_push(struct jitring *jr, struct jitring_trampolines *t)
{
	static const struct jr_kit_ops ops = { sets_maintain, sets_wanted };
	struct jitring_trampolines *head;
	uint32_t s = jitring_enter(jr);

	if (s >= JR_CLOSING)
		return jitring_refuse_state(jr, s);
	/* Before the push: a flusher that sees the set calls these. */
	if (jr->ops->kit_register)
		jr->ops->kit_register(&ops);
	head = atomic_load_explicit(&jr->trampoline_sets, memory_order_acquire);
	do {
		t->next = head;
		/* Release: pairs with the acquire load of the head in
		 * sets_maintain() (the set is complete); acquire:
		 * so is every set pushed before us. */
	} while (!atomic_compare_exchange_weak_explicit(
		&jr->trampoline_sets, &head, t, memory_order_acq_rel,
		memory_order_acquire));
	/*
	 * The stock beyond the first arenas is the flusher's to make: wake
	 * it, or a flusher asleep without a timer leaves the set short until
	 * the first switch (a storm's first copies then wait).  The fence is
	 * the Dekker pair of the flusher's store of its sleep mode before
	 * its check in sets_wanted(): it sees the set, or we
	 * see it asleep.
	 */
	atomic_thread_fence(memory_order_seq_cst);
	wake_flusher(t);
	jitring_exit(jr);
	return 0;
}

/* Take @t off the list of @jr, which is closed (no flusher reads it). */
static void set_unlink(struct jitring *jr, struct jitring_trampolines *t)
{
	struct jitring_trampolines **pp, *head;

	/* Other frees and rebinds of the same writer's sets; fork. */
	pthread_mutex_lock(&jr->lock);
	head = atomic_load_explicit(&jr->trampoline_sets, memory_order_relaxed);
	if (head == t) {
		atomic_store_explicit(&jr->trampoline_sets, t->next,
				      memory_order_relaxed);
	} else {
		for (pp = head ? &head->next : NULL; pp && *pp;
		     pp = &(*pp)->next) {
			if (*pp == t) {
				*pp = t->next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&jr->lock);
}

int jitring_trampolines_new(struct jitring *jr,
			    const struct jitring_trampoline_template *ut,
			    struct jitring_trampolines **out)
{
	struct jitring_trampoline_template tp;
	struct jitring_trampolines *t;
	struct tr_arena *a;
	uint64_t slot;
	uint32_t s, made = 0;
	int eh_size, ret;

	if (!jr || jr->magic != JR_MAGIC || !ut || !out)
		return -EINVAL;
	ret = template_check(ut, &tp, &eh_size);
	if (ret)
		return ret;
	/* An early out only (no arenas for a closed writer): the check that
	 * counts is the one under jitring_enter() below. */
	s = atomic_load_explicit(&jr->state, memory_order_relaxed);
	if (s >= JR_CLOSING)
		return jitring_refuse_state(jr, s);
	pthread_once(&tr_once, tr_init);

	t = aligned_alloc(JITRING_CACHELINE, sizeof(*t));
	if (!t)
		return -ENOMEM;
	memset(t, 0, sizeof(*t));
	t->image = -1;
	t->elf_fd = -1;
	atomic_init(&t->jr, jr);
	t->code_size = tp.code_size;
	t->salt_offset = tp.salt_offset;
	t->eh_frame_size = (uint32_t)eh_size;
	t->code = malloc(tp.code_size);
	t->eh_frame = eh_size ? malloc((size_t)eh_size) : NULL;
	if (!t->code || (eh_size && !t->eh_frame)) {
		ret = -ENOMEM;
		goto err;
	}
	memcpy(t->code, tp.code, tp.code_size);
	if (eh_size && jitring_eh_frame_build(tp.cfi, tp.code_size, t->eh_frame,
					      (size_t)eh_size) != eh_size) {
		ret = -EINVAL;
		goto err;
	}
	{
		/* Every copy's group is this one but for name and address. */
		struct jitring_entry e = {
			.name = "x",
			.code_addr = t->code,
			.code_size = t->code_size,
			.eh_frame = t->eh_frame,
			.eh_frame_size = t->eh_frame_size,
		};

		ret = jitring_record_plan(&t->group, &e);
		if (ret)
			goto err;
		t->group.e = NULL;
	}
	slot = jitring_trampoline_slot_size(tp.code_size, (uint64_t)eh_size);
	t->slot_size = (uint32_t)slot;
	t->page = jitring_page_size();
	{
		size_t len = slot * JR_TRAMP_ARENA_MIN_SLOTS;
		uint64_t stock = (uint64_t)jr->ready_copies * slot;
		uint32_t want = JR_TRAMP_WANT_INIT;

		if (len < JR_TRAMP_ARENA_BYTES)
			len = JR_TRAMP_ARENA_BYTES;
		len = JR_ALIGN(len, t->page);
		{
			/*
			 * Mapped, not written, arenas can be larger at no
			 * cost: the image is made once, and each arena maps
			 * it JR_TRAMP_IMAGE_MAPS times; an image that tiles
			 * is JR_TRAMP_IMAGE_TILED_SCALE times an arena's
			 * bytes (1 MiB: a default stock of 1.7 million
			 * copies in about 200 mappings).  Where it cannot be
			 * repeated (see
			 * jitring_trampoline_image_len(); or a test's fault,
			 * for arenas that run out quickly), a large stock
			 * gets a larger image (up to JR_TRAMP_IMAGE_MAX), so
			 * it is at most about 64 arenas.
			 */
			uint32_t maps;
			size_t ilen = jitring_trampoline_image_len(
				len * JR_TRAMP_IMAGE_SCALE, slot, t->page,
				&maps);

			if (JITRING_FAULT(tramp_image_once, jr))
				maps = 1;
			else if (maps > 1)
				ilen = jitring_trampoline_image_len(
					len * JR_TRAMP_IMAGE_TILED_SCALE, slot,
					t->page, &maps);

			while (maps == 1 && ilen < JR_TRAMP_IMAGE_MAX &&
			       ilen * 4 * JR_TRAMP_WANT_MAX < stock)
				ilen *= 2;
			if (jr->flags & JITRING_F_TRAMPOLINE_ELF) {
				ret = elf_make(t, jr->file.dir, len);
				if (ret)
					jitring_log(
						jr, JITRING_LOG_WARNING,
						"trampoline ELF file in %s: "
						"%s (memfd arenas instead)",
						jr->file.dir, strerror(-ret));
			}
			if (t->elf_fd < 0)
				t->image = image_make(t, ilen);
			if (t->elf_fd >= 0) {
				len = t->elf.arena_len;
			} else if (t->image >= 0) {
				t->image_len = ilen;
				t->image_maps = maps;
				len = ilen * maps;
				if (maps > 1)
					want = JR_TRAMP_WANT_IMAGE;
			}
		}
		/*
		 * The runtime said how many copies to keep ready: enough
		 * arenas for the stock, and one more (cur is not counted as
		 * ready).  Written arenas grow with it, to keep their number
		 * near JR_TRAMP_WANT_MAX; an image's size is fixed.  Its
		 * figure rules, as ready_rings does: below the default it
		 * lowers the stock (a runtime with many sets, or few
		 * threads), to no fewer than JR_TRAMP_WANT_INIT ready.
		 */
		t->want_default = want;
		if (stock) {
			while (t->image < 0 && t->elf_fd < 0 &&
			       len < JR_TRAMP_ARENA_MAX &&
			       len * JR_TRAMP_WANT_MAX < stock)
				len *= 2;
			want = stock_floor(stock, len);
		}
		atomic_init(&t->slots_len, len);
		t->nslots = len / slot;
		atomic_init(&t->want, want);
		t->want_floor = want;
	}
	t->serial =
		atomic_fetch_add_explicit(&tr_serial, 1, memory_order_relaxed);
	atomic_init(&t->nready, 0);
	atomic_init(&t->all, NULL);
	atomic_init(&t->installed, NULL);
	atomic_init(&t->reuses, 0);
	for (uint32_t i = 0; i < JR_TRAMP_READY_CAP; i++)
		atomic_init(&t->ready[i], NULL);

	/* The first arena now; with the rings engine JR_TRAMP_WANT_INIT
	 * more, so the first switch finds one ready (the flusher makes the
	 * rest of `want`: jitring_trampolines_new() wakes it). */
	ret = arena_make(t, &a);
	if (ret)
		goto err;
	atomic_init(&t->cur, a);
	a->inst_next = NULL;
	atomic_init(&t->installed, a);
	made++;
	if (jr->engine == JITRING_ENGINE_RINGS) {
		while (made <= JR_TRAMP_WANT_INIT && !arena_make(t, &a)) {
			ready_put(t, a);
			made++;
		}
	}

	ret = set_push(jr, t);
	if (ret)
		goto err;
	jitring_count(&jr->c.trampoline_arenas_ahead, made);
	*out = t;
	return 0;

err:
	set_destroy(t);
	return ret;
}

/*
 * Describe the copy @e->code_addr (its group @g planned) through writer
 * @jr, with the dumped bytes salted for generation @gen (see salt_of())
 * into @dumped (room for t->code_size).
 */
static inline __attribute__((always_inline)) int64_t
copy_write(struct jitring_trampolines *t, struct jitring *jr,
	   struct jitring_group *g, struct jitring_entry *e,
	   unsigned char *dumped, uint64_t gen)
{
	int64_t idx;

	if (t->salt_offset != JITRING_TRAMPOLINE_NO_SALT) {
		uint64_t salt = salt_of(t, e->code_addr, gen);

		memcpy(dumped, t->code, t->code_size);
		if (t->code_size >= JR_TRAMP_SALT_SIZE) {
			memcpy(dumped + t->salt_offset, &salt, sizeof(salt));
		} else {
			const unsigned char *sb = (const unsigned char *)&salt;

			for (uint32_t k = 0; k < t->code_size; k++)
				dumped[k] ^= sb[k];
		}
		e->code_bytes = dumped;
	}
	idx = jitring_write_group(jr, g);
	if (idx > 0)
		jitring_count(&jr->c.trampoline_copies, 1);
	return idx;
}

/*
 * Templates over COPY_STACK_MAX bytes (the built-in one has 16 or 28):
 * their dumped bytes need a buffer of up to a page, kept out of the common
 * path's frame, so that a fresh thread's first copy does not touch (and
 * fault in) a new page of its stack.
 */
#define COPY_STACK_MAX 128u

static JR_NOINLINE int64_t copy_write_big(struct jitring_trampolines *t,
					  struct jitring *jr,
					  struct jitring_group *g,
					  struct jitring_entry *e, uint64_t gen)
{
	unsigned char dumped[JITRING_TRAMPOLINE_MAX];

	return copy_write(t, jr, g, e, dumped, gen);
}

/*
 * The group of a copy named @name, or by @parts when @name is NULL, into
 * @g and @e (the address is the caller's to fill).  The name's one check:
 * before a slot is claimed, so a refused name wastes none.
 * Return: 0; -EINVAL (counted) for a bad name; -ESHUTDOWN once @jr closes.
 */
static int copy_plan(struct jitring_trampolines *t, struct jitring *jr,
		     const char *name, const struct jitring_str *parts,
		     uint32_t nparts, struct jitring_group *g,
		     struct jitring_entry *e)
{
	uint32_t s;

	memset(e, 0, sizeof(*e));
	e->name = name;
	if (!name) {
		e->name_parts = parts;
		e->nr_name_parts = nparts;
	}
	e->code_size = t->code_size;
	e->code_bytes = t->code;
	e->eh_frame = t->eh_frame;
	e->eh_frame_size = t->eh_frame_size;
	/* The set's group, planned once, renamed. */
	*g = t->group;
	if (jitring_record_rename(g, e))
		return jitring_refuse_args(jr, -EINVAL);
	/* An early out only: jitring_write() decides (a slot is wasted if
	 * close starts in between). */
	s = atomic_load_explicit(&jr->state, memory_order_relaxed);
	if (unlikely(s >= JR_CLOSING))
		return jitring_refuse_state(jr, s);
	return 0;
}

/* Describe @e (planned by copy_plan(), its address filled in). */
static inline int64_t copy_describe(struct jitring_trampolines *t,
				    struct jitring *jr, struct jitring_group *g,
				    struct jitring_entry *e, uint64_t gen)
{
	unsigned char dumped[COPY_STACK_MAX];

	if (likely(t->code_size <= COPY_STACK_MAX))
		return copy_write(t, jr, g, e, dumped, gen);
	return copy_write_big(t, jr, g, e, gen);
}

/* A copy named @name, or by @parts when @name is NULL. */
static int64_t get_copy(struct jitring_trampolines *t, const char *name,
			const struct jitring_str *parts, uint32_t nparts,
			void **addr)
{
	struct jitring_group g;
	struct jitring_entry e;
	struct jitring *jr;
	struct tr_arena *a;
	uint64_t i;
	int64_t idx;

	if (!t)
		return -EINVAL;
	jr = tr_writer(t);
	if (!addr)
		return jitring_refuse_args(jr, -EINVAL);
	idx = copy_plan(t, jr, name, parts, nparts, &g, &e);
	if (idx)
		return idx;

	for (;;) {
		/* Pairs with the release CAS of cur in arena_advance() (and
		 * the set's publication for the first arena). */
		a = atomic_load_explicit(&t->cur, memory_order_acquire);
		i = atomic_fetch_add_explicit(&a->next, 1,
					      memory_order_relaxed);
		if (likely(i < a->nslots))
			break;
		idx = arena_advance(t, a);
		if (idx)
			return idx;
	}
	e.code_addr = a->base + i * t->slot_size;
	idx = copy_describe(t, jr, &g, &e, 0);
	if (idx > 0)
		*addr = (void *)e.code_addr;
	return idx;
}

int64_t jitring_trampolines_get(struct jitring_trampolines *t, const char *name,
				void **addr)
{
	/* A NULL @name with no pieces: refused by the name check. */
	return get_copy(t, name, NULL, 0, addr);
}

int64_t jitring_trampolines_get_parts(struct jitring_trampolines *t,
				      const struct jitring_str *parts,
				      unsigned int nr_parts, void **addr)
{
	return get_copy(t, NULL, parts, nr_parts, addr);
}

/*
 * Whether @addr is a copy this set handed out: a slot's start in an arena
 * that was cur, below the arena's claim counter.  Only installed arenas
 * are searched: that list is never unlinked while the set lives, unlike
 * `all`, whose ready arenas the flusher may unmap under a reader.
 */
static bool handed_out(const struct jitring_trampolines *t, const void *addr)
{
	uintptr_t p = (uintptr_t)addr;

	/* Pairs with the release CAS in installed_push(). */
	for (const struct tr_arena *a = atomic_load_explicit(
		     &((struct jitring_trampolines *)t)->installed,
		     memory_order_acquire);
	     a; a = a->inst_next) {
		uintptr_t base = (uintptr_t)a->base;
		uint64_t i, claimed;

		if (p < base || p >= base + a->nslots * t->slot_size)
			continue;
		if ((p - base) % t->slot_size)
			return false;
		i = (p - base) / t->slot_size;
		/* Relaxed: the caller got @addr from a get() whose
		 * fetch_add happened before it. */
		claimed = atomic_load_explicit(&((struct tr_arena *)a)->next,
					       memory_order_relaxed);
		return i < claimed;
	}
	return false;
}

/* Describe again the copy at @addr, named @name or by @parts. */
static int64_t reuse_copy(struct jitring_trampolines *t, void *addr,
			  const char *name, const struct jitring_str *parts,
			  uint32_t nparts)
{
	struct jitring_group g;
	struct jitring_entry e;
	struct jitring *jr;
	int64_t idx;

	if (!t)
		return -EINVAL;
	jr = tr_writer(t);
	idx = copy_plan(t, jr, name, parts, nparts, &g, &e);
	if (idx)
		return idx;
	if (!addr || !handed_out(t, addr))
		return jitring_refuse_args(jr, -EINVAL);
	e.code_addr = addr;
	return copy_describe(t, jr, &g, &e,
			     atomic_fetch_add_explicit(&t->reuses, 1,
						       memory_order_relaxed) +
				     1);
}

int64_t jitring_trampolines_reuse(struct jitring_trampolines *t, void *addr,
				  const char *name)
{
	return reuse_copy(t, addr, name, NULL, 0);
}

int64_t jitring_trampolines_reuse_parts(struct jitring_trampolines *t,
					void *addr,
					const struct jitring_str *parts,
					unsigned int nr_parts)
{
	return reuse_copy(t, addr, NULL, parts, nr_parts);
}

int jitring_trampolines_rebind(struct jitring_trampolines *t,
			       struct jitring *jr)
{
	struct jitring *old;
	int ret;

	if (!t || !jr || jr->magic != JR_MAGIC)
		return -EINVAL;
	old = tr_writer(t);
	if (old == jr)
		return 0;
	/* Pairs with the release store of JR_CLOSED in jitring_close(): the
	 * old flusher is gone, so the set's flusher-private fields are ours
	 * until the push below hands them to the new one. */
	if (atomic_load_explicit(&old->state, memory_order_acquire) !=
	    JR_CLOSED)
		return -EBUSY;
	set_unlink(old, t);
	t->warned = false;
	/* The floor the new writer's ready_copies asks for (its flusher
	 * refills to it, or gives back what is above); the arenas' size
	 * stays. */
	t->want_floor =
		jr->ready_copies ?
			stock_floor(
				(uint64_t)jr->ready_copies * t->slot_size,
				atomic_load_explicit(&t->slots_len,
						     memory_order_relaxed)) :
			t->want_default;
	atomic_store_explicit(&t->want, t->want_floor, memory_order_relaxed);
	/* What the set brings is stock ready ahead for this writer too. */
	jitring_count(&jr->c.trampoline_arenas_ahead,
		      (uint64_t)atomic_load_explicit(&t->nready,
						     memory_order_relaxed));
	/* Pairs with the acquire load in tr_writer(): a get() that sees the
	 * new writer sees its handle. */
	atomic_store_explicit(&t->jr, jr, memory_order_release);
	ret = set_push(jr, t);
	/* Refused (the new writer is closing): the set is that writer's all
	 * the same, off every list, and may be rebound again once it is
	 * closed. */
	return ret;
}

void jitring_trampolines_state(const struct jitring_trampolines *t,
			       struct jitring_trampolines_state *st)
{
	struct jitring_trampolines *m = (struct jitring_trampolines *)t;
	struct tr_arena *a;
	uint64_t used;

	/* Pairs with the release CAS of cur in arena_advance(). */
	a = atomic_load_explicit(&m->cur, memory_order_acquire);
	used = atomic_load_explicit(&a->next, memory_order_relaxed);
	st->nready = atomic_load_explicit(&m->nready, memory_order_relaxed);
	st->want = atomic_load_explicit(&m->want, memory_order_relaxed);
	st->cur_left = used < a->nslots ? a->nslots - used : 0;
	st->nslots = t->nslots;
	st->slot_size = t->slot_size;
	st->image_maps = t->image >= 0 ? t->image_maps : 0;
}

int jitring_trampolines_free(struct jitring_trampolines *t)
{
	struct jitring *jr;

	if (!t)
		return 0;
	jr = tr_writer(t);
	/* Pairs with the release store of JR_CLOSED in jitring_close(): the
	 * flusher is gone and no set is pushed any more. */
	if (atomic_load_explicit(&jr->state, memory_order_acquire) != JR_CLOSED)
		return -EBUSY;
	set_unlink(jr, t);
	set_destroy(t);
	return 0;
}
