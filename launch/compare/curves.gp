# Validation loss against tokens seen, one labelled line per attention type.
# Called by compare_util.py with: datafile, outfile, titles (space-separated), n (blocks).
set terminal pngcairo size 900,600 noenhanced font "sans,11"
set output outfile
set title "Validation loss against tokens seen"
set xlabel "tokens seen"
set ylabel "validation loss"
set format x "%.1s%c"
set key outside right top
set grid
plot for [i=0:n-1] datafile index i using 1:2 with linespoints lw 2 pt (i % 7) + 1 title word(titles, i + 1)
