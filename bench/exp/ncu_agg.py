# bench/exp/ncu_agg.py: sums an ncu --csv run of gpu__time_duration.sum per kernel (chunkprof.sh)
import csv, sys, re, collections
# ncu --csv --metrics gpu__time_duration.sum output -> per-kernel count, total us, mean us
rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
hdr = rows[0]; ki = hdr.index('Kernel Name'); vi = hdr.index('Metric Value'); mi = hdr.index('Metric Name')
agg = collections.OrderedDict()
for r in rows[1:]:
    if r[mi] != 'gpu__time_duration.sum': continue
    name = re.sub(r'\(.*$', '', r[ki]).replace('void ', '')
    c, t = agg.get(name, (0, 0.0)); agg[name] = (c + 1, t + float(r[vi].replace(',', '')) / 1e3)
tot = sum(t for c, t in agg.values())
for n, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print('%-60s %6d %10.1f us %8.2f us/launch %5.1f%%' % (n[:60], c, t, t / c, 100 * t / tot))
print('total %.1f us over %d launches' % (tot, sum(c for c, t in agg.values())))
