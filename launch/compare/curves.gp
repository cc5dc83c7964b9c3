# Validation loss against tokens seen, one labelled line per attention type; with several
# seeds (bands=1) the line is the mean and a shaded band spans mean ± sd.
# Called by compare_util.py with: datafile, outfile, titles (space-separated), n (blocks), bands.
set terminal pngcairo size 900,600 noenhanced font "sans,11"
set output outfile
set title "Validation loss against tokens seen"
set xlabel "tokens seen"
set ylabel "validation loss"
set format x "%.1s%c"
set key outside right top
set grid
set xrange [0:*]
set style fill transparent solid 0.18 noborder
# Dash patterns as well as colours: early in training the curves lie on top of each other.
if (bands) {
  plot for [i=0:n-1] datafile index i using 1:($2-$3):($2+$3) with filledcurves lc i+1 notitle, \
       for [i=0:n-1] datafile index i using 1:2 with linespoints lw 2 lc i+1 dt 1 + i % 5 pt (i % 7) + 1 title word(titles, i + 1)
} else {
  plot for [i=0:n-1] datafile index i using 1:2 with linespoints lw 2 dt 1 + i % 5 pt (i % 7) + 1 title word(titles, i + 1)
}
