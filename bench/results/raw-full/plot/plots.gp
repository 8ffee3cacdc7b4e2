set terminal pngcairo size 900,560 font "sans,10" noenhanced
set logscale x 2
set xrange [0.75:5500]
set xtics ("1" 1, "2" 2, "4" 4, "8" 8, "16" 16, "64" 64, "256" 256, "1024" 1024, "4096" 4096)
set grid
set key outside right top
set xlabel "threads (real, on 2 CPUs)"
set datafile missing "NaN"
set output "/work/main/bench/results/throughput-full.png"
set title "jitring_write throughput, CPython shape (end to end, incl. jitring_flush; full matrix)"
set ylabel "million entries / s"
set yrange [0:*]
plot "/work/main/bench/results/raw-full/plot/tput.dat" u 1:2 w lp lw 2 t "floor (no sharing, no file)", "" u 1:3 w lp lw 2 t "rings", "" u 1:4 w lp lw 2 t "mutex"
set output "/work/main/bench/results/latency-full.png"
set title "jitring_write per-call latency, CPython shape (full matrix)"
set ylabel "microseconds (log)"
set logscale y
set yrange [*:*]
plot "/work/main/bench/results/raw-full/plot/lat.dat" u 1:6 w lp lw 2 dt 1 lc 1 t "rings p50", "" u 1:7 w lp lw 2 dt 2 lc 1 t "rings p99", "" u 1:8 w lp lw 2 dt 3 lc 1 t "rings p99.9", "" u 1:9 w lp lw 1 dt 4 lc 1 t "rings max", "" u 1:10 w lp lw 2 dt 1 lc 2 t "mutex p50", "" u 1:11 w lp lw 2 dt 2 lc 2 t "mutex p99", "" u 1:12 w lp lw 2 dt 3 lc 2 t "mutex p99.9", "" u 1:13 w lp lw 1 dt 4 lc 2 t "mutex max", "" u 1:4 w lp lw 1 dt 3 lc 3 t "floor p99.9"
unset logscale y
set output "/work/main/bench/results/shapes-full.png"
set title "rings/mutex throughput by entry shape (full matrix)"
set ylabel "rings / mutex"
set yrange [0:*]
plot "/work/main/bench/results/raw-full/plot/shapes.dat" u 1:2 w lp lw 2 t "cpython", "" u 1:3 w lp lw 2 t "load", "" u 1:4 w lp lw 2 t "unw+dbg+load", "" u 1:5 w lp lw 2 t "code 4 KiB", 3 w l dt 2 lc rgb "gray" t "target 3x"
