/* SPDX-License-Identifier: MIT */
/*
 * Trampoline sets (the runtime kit): layout constants shared by
 * trampolines.c and its unit test.  The entry points are public
 * (jitring_trampolines_*() in jitring.h); the rings engine's flusher keeps
 * the stock through the hook set_push() registers (struct jr_kit_ops).
 */
#ifndef JITRING_SRC_TRAMPOLINES_H
#define JITRING_SRC_TRAMPOLINES_H

#include <stdint.h>

/* Copies start on this boundary. */
#define JR_TRAMP_SLOT_ALIGN 16u
/* An arena holds at least this many bytes of slots, rounded up to pages, */
#define JR_TRAMP_ARENA_BYTES (64u << 10)
/* and at least this many slots.  Under demand (the most ready arenas and
 * still a caller had to make one) new arenas double up to the maximum. */
#define JR_TRAMP_ARENA_MIN_SLOTS 32u
#define JR_TRAMP_ARENA_MAX (1u << 20)
/* Arenas that map the set's image hold this many times as many slots (they
 * cost no memory of their own; the image, once, does). */
#define JR_TRAMP_IMAGE_SCALE 4u
#define JR_TRAMP_IMAGE_MAX (4u << 20)
/* ... and an image that tiles (mapped JR_TRAMP_IMAGE_MAPS times, below)
 * this many times: 1 MiB of memory once per set, and each arena's 17
 * system calls map 174,080 copies of the built-in template, so a storm's
 * refills take mmap_lock a quarter as often. */
#define JR_TRAMP_IMAGE_TILED_SCALE 16u
/* An image whose length is a whole number of slots and pages (see
 * jitring_trampoline_image_len()) is mapped this many times back to back
 * in each arena: as many more slots, for the same memory. */
#define JR_TRAMP_IMAGE_MAPS 16u
/* Ready arenas kept per set: the low-water mark starts here (unless
 * ready_copies says), doubles each time a caller had to make an arena or
 * took the last one, up to the maximum (JR_TRAMP_READY_CAP / 2 with an
 * image mapped once per arena, see want_grow()). */
#define JR_TRAMP_WANT_INIT 2u
/* ... and here for arenas that map the image JR_TRAMP_IMAGE_MAPS times
 * (no memory of their own, 16 MiB of address space each): 10 ready are
 * 1,740,800 copies of the built-in template, what a storm of 4096 new
 * threads taking 400 copies each (1,638,400) draws before the flusher,
 * queued behind the storm, gets a CPU -- the storm the 4096 spare rings
 * are kept for (bench/README.md, Thread storms). */
#define JR_TRAMP_WANT_IMAGE 10u
#define JR_TRAMP_WANT_MAX 16u
/* Capacity of a set's ready array (above the maximum: losers of the race
 * to install an arena park theirs here too). */
#define JR_TRAMP_READY_CAP 256u

/* Bytes of the salt a copy's dumped bytes get. */
#define JR_TRAMP_SALT_SIZE 8u

/**
 * jitring_trampoline_slot_size() - Bytes one copy takes in an arena.
 * @code_size: the template's code_size.
 * @eh_frame_size: bytes jitring_eh_frame_build() gives for its CFI (0 for
 *	none).
 *
 * perf maps a copy as [addr, addr + ALIGN_8(code_size) + mapped_size) with
 * mapped_size = ALIGN_16(eh_frame_size + 20), 0 without CFI; a slot holds
 * all of it, so no copy lies inside another's mapping.
 */
static inline uint64_t jitring_trampoline_slot_size(uint64_t code_size,
						    uint64_t eh_frame_size)
{
	uint64_t ext = ((code_size + 7) & ~(uint64_t)7) +
		       (eh_frame_size ?
				((eh_frame_size + 20 + 15) & ~(uint64_t)15) :
				0);

	return (ext + JR_TRAMP_SLOT_ALIGN - 1) &
	       ~(uint64_t)(JR_TRAMP_SLOT_ALIGN - 1);
}

/*
 * jitring_trampoline_image_len() - Image length for arenas of @maps images.
 * @want: the length wanted (a whole number of pages).
 * @slot: bytes per slot; @page: the page size.
 * @maps: out: how many times each arena maps the image.
 *
 * Images mapped back to back keep one run of slots only if the image is a
 * whole number of slots (and it is a whole number of pages to be mapped):
 * @want rounded down to a multiple of lcm(@slot, @page), mapped
 * JR_TRAMP_IMAGE_MAPS times.  Where that multiple exceeds @want, @want as
 * it is, mapped once.
 */
static inline uint64_t jitring_trampoline_image_len(uint64_t want,
						    uint64_t slot,
						    uint64_t page,
						    uint32_t *maps)
{
	uint64_t a = slot, b = page, lcm;

	while (b) {
		uint64_t r = a % b;

		a = b;
		b = r;
	}
	lcm = slot / a * page;
	if (lcm > want) {
		*maps = 1;
		return want;
	}
	*maps = JR_TRAMP_IMAGE_MAPS;
	return want - want % lcm;
}

struct jitring_trampolines;

/**
 * struct jitring_trampolines_state - A set's hand-out state, for tests.
 * @nready: arenas in the ready array (an upper bound while puts run).
 * @want: the low-water mark the flusher refills to.
 * @cur_left: slots left in the current arena.
 * @nslots: slots per arena.
 * @slot_size: bytes per slot.
 * @image_maps: mappings of the image per arena (0: written arenas).
 */
struct jitring_trampolines_state {
	int32_t nready;
	uint32_t want;
	uint64_t cur_left;
	uint64_t nslots;
	uint32_t slot_size;
	uint32_t image_maps;
};

/* Read @t's state (relaxed; exact only while no thread uses the set). */
void jitring_trampolines_state(const struct jitring_trampolines *t,
			       struct jitring_trampolines_state *st);

#endif /* JITRING_SRC_TRAMPOLINES_H */
