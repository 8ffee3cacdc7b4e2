#!/bin/sh
# SPDX-License-Identifier: MIT
# Make the installed static archive from the internal one: one relocatable
# object (ld -r) in which every hidden symbol is made local, so a program
# that links libjitring.a sees only the public API, exactly as with the
# shared library (whose version script hides the rest).
#   static-archive.sh LD OBJCOPY AR IN.a OUT.a
set -eu
ld=$1 objcopy=$2 ar=$3 in=$4 out=$5
obj=$out.tmp.o
"$ld" -r --whole-archive "$in" -o "$obj"
"$objcopy" --localize-hidden "$obj"
rm -f "$out"
"$ar" rcs "$out" "$obj"
rm -f "$obj"
