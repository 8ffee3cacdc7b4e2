; SPDX-License-Identifier: MIT
; A call chain for lli: main -> chain_a -> chain_b -> chain_hot, the hot
; loop at the bottom, so that perf's samples in chain_hot need every JIT
; caller above them to be unwound.  noinline keeps each frame; the
; volatile accumulator keeps the loop.  main calls the chain again and
; again until the process has used argv[1] microseconds of CPU time
; (clock(); 400000 when not given; lli passes the script's arguments
; on): perf's cpu-clock samples count CPU time, so a slow or loaded
; machine runs the program longer and perf still takes as many samples.

define internal i64 @chain_hot(i64 %n) noinline {
entry:
  %acc = alloca i64
  store volatile i64 0, i64* %acc
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %v = load volatile i64, i64* %acc
  %m = mul i64 %i, 2654435761
  %x = xor i64 %v, %m
  store volatile i64 %x, i64* %acc
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, %n
  br i1 %c, label %loop, label %done
done:
  %r = load volatile i64, i64* %acc
  ret i64 %r
}

define internal i64 @chain_b(i64 %n) noinline {
  %r = call i64 @chain_hot(i64 %n)
  %s = add i64 %r, 1
  ret i64 %s
}

define internal i64 @chain_a(i64 %n) noinline {
  %r = call i64 @chain_b(i64 %n)
  %s = add i64 %r, 2
  ret i64 %s
}

declare i64 @atol(i8*)
declare i64 @clock()

define i32 @main(i32 %argc, i8** %argv) {
entry:
  %has = icmp sgt i32 %argc, 1
  br i1 %has, label %arg, label %start
arg:
  %p = getelementptr i8*, i8** %argv, i64 1
  %s = load i8*, i8** %p
  %v = call i64 @atol(i8* %s)
  br label %start
start:
  %budget = phi i64 [ 400000, %entry ], [ %v, %arg ]
  %t0 = call i64 @clock()
  br label %run
run:
  ; A few milliseconds in chain_hot between two clock() calls.
  %acc = phi i64 [ 0, %start ], [ %acc1, %run ]
  %r = call i64 @chain_a(i64 4000000)
  %acc1 = add i64 %acc, %r
  %now = call i64 @clock()
  %used = sub i64 %now, %t0
  %more = icmp slt i64 %used, %budget
  br i1 %more, label %run, label %done
done:
  %t = trunc i64 %acc1 to i32
  %z = and i32 %t, 0
  ret i32 %z
}
