#!/usr/bin/env bash
# Log-log plot of tests/bench/bench_scale and bench_scale_mount.py rows ("SERIES X VALUE
# UNIT ...") into PNG: one panel per cost. Needs gnuplot (Debian: gnuplot-nox).
# usage: tests/bench/scale_plot.sh OUT.png ROWS.txt...
set -euo pipefail
out=$1
shift
command -v gnuplot >/dev/null || { echo "scale_plot: gnuplot not found (mountscripts/deps bench installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat "$@" | awk -v d="$tmp" 'NF >= 3 && $2 ~ /^[0-9]+$/ { print $2, $3 > (d "/" $1 ".dat") }'
gnuplot <<GP
set terminal pngcairo size 1200,900 font ",10" noenhanced
set output "$out"
set logscale xy
set grid
set key top left
set multiplot layout 2,2 title "Zephon: how costs grow (tests/bench/bench_scale, bench_scale_mount.py)"
set title "one order of N samples"
set xlabel "N (samples)"
plot "$tmp/order_gsn_ns.dat" w lp t "ns per gsn (random, m=8)", \
     "$tmp/order_first_batch_us.dat" w lp t "first batch of 1024 ids (us)", \
     "$tmp/order_peak_rss_mib.dat" w lp t "peak RSS (MiB)"
set title "mixture of k sources (10^9 samples each)"
set xlabel "k (sources)"
plot "$tmp/mix_gsn_ns.dat" w lp t "ns per gsn (random, m=8)", \
     "$tmp/mix_new_us.dat" w lp t "mixture_new (us)", \
     "$tmp/mix_peak_rss_mib.dat" w lp t "peak RSS (MiB)", \
     "$tmp/mix_mount_first_batch_s.dat" u 1:(\$2*1e3) w lp t "mount -> first batch (ms)", \
     "$tmp/mix_mount_hwm_mib.dat" w lp t "daemon VmHWM (MiB)"
set title "resume point over J node journals (10 layouts each)"
set xlabel "J (journals)"
plot "$tmp/resume_point_s.dat" w lp t "journal_resume_point_files (s)", \
     "$tmp/resume_journals_bytes.dat" u 1:(\$2/1e6) w lp t "journals (MB)"
set title "a mount serving 8 ranks of world_size W"
set xlabel "W (world_size)"
plot "$tmp/status_render_ms.dat" w lp t "/status (ms)", \
     "$tmp/metrics_render_ms.dat" w lp t "/metrics (ms)", \
     "$tmp/status_bytes.dat" u 1:(\$2/1e3) w lp t "/status (kB)", \
     "$tmp/metrics_bytes.dat" u 1:(\$2/1e3) w lp t "/metrics (kB)"
unset multiplot
GP
echo "scale_plot: wrote $out"
