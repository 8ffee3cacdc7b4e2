; SPDX-License-Identifier: MIT
; A call chain for lli: main -> chain_a -> chain_b -> chain_hot, the hot
; loop at the bottom, so that perf's samples in chain_hot need every JIT
; caller above them to be unwound.  noinline keeps each frame; the
; volatile accumulator keeps the loop.  The iteration count is argv[1]
; when given (lli passes the script's arguments on).

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

define i32 @main(i32 %argc, i8** %argv) {
entry:
  %has = icmp sgt i32 %argc, 1
  br i1 %has, label %arg, label %run
arg:
  %p = getelementptr i8*, i8** %argv, i64 1
  %s = load i8*, i8** %p
  %v = call i64 @atol(i8* %s)
  br label %run
run:
  %n = phi i64 [ 300000000, %entry ], [ %v, %arg ]
  %r = call i64 @chain_a(i64 %n)
  %t = trunc i64 %r to i32
  %z = and i32 %t, 0
  ret i32 %z
}
