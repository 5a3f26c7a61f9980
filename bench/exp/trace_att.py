# bench/exp/trace_att.py FILE: the flash decode's blocks on the decode graph's time line, from a
# ring written by a build with trace.patch and att-trace.patch (RL_EXP_TRACE). Each attention
# launch (a layer's key cache within one token) is timed against the streamed launch before it
# (QKV: the latest end of a streamed block before the attention's first release) and the one
# after it (Wo: the first streamed release after the attention's last block ends). Per grid
# size, the median over launches (the first tenth left out), in us after QKV's last end:
#   start1 / rel1 / relN  the attention's first start, first and last release from its PDL wait;
#   tiles1 / tilesN       its blocks' warps all done with their key tiles (flash_mma_kernel);
#   merged                its last output or merge written (flash_mma_kernel);
#   end1 / endN           its blocks' ends;
#   wo_rel1               Wo's first block released.
# Then, where the ring has att-trace.patch's cycle records (both tag bits), the same points within
# each block by its SM's clock64, which resolves what %globaltimer's step may not: per grid size,
# the median over launches of the blocks' median cycles after their start at the release, the
# tiles, the merge and the end, and the same in us at the clock the records themselves give
# (the blocks' summed global-timer lengths over their summed cycles).
import bisect, collections, struct, sys, statistics as st
from trace_agg import load

fn = sys.argv[1]
raw = open(fn, 'rb').read()
att, phase, cyc = collections.defaultdict(list), {}, {}
prev = None  # a block writes its three records in a row: the cycles follow its phase record
for i in range((len(raw) - 16) // 40):
    k, sb, t0, t1, t2 = struct.unpack_from('<5Q', raw, 16 + 40 * i)
    tag, key = k >> 62, k & ~(3 << 62)
    if tag == 3:
        if prev and prev[:2] == (key, sb):
            cyc[prev] = (t0 & 0xffffffff, t0 >> 32, t1, t2)
    elif tag == 2:
        att[key].append((t0, t1, t2, sb))
    elif tag == 1:
        phase[(key, sb, t2)] = (t0, t1)
    prev = (key, sb, t2) if tag == 1 else None
if not att:  # a ring without att-trace.patch's records (trace1 runs this on every build)
    sys.exit(0)
n, cap, tok, launches = load(fn)
ends = sorted(r[4] for _, rs in launches for r in rs)
rels = sorted(r[3] for _, rs in launches for r in rs)
print('%s: %d attention records, %d phase records, token %.1f us' % (fn, sum(map(len, att.values())), len(phase), tok / 1e3))
rows = collections.defaultdict(lambda: collections.defaultdict(list))
crow = collections.defaultdict(lambda: collections.defaultdict(list))
ns_sum = cyc_sum = 0
for key, rs in att.items():
    rs.sort()
    groups, cur = [], [rs[0]]
    for r in rs[1:]:
        if r[0] - cur[0][0] > tok / 2:
            groups.append(cur); cur = [r]
        else:
            cur.append(r)
    groups.append(cur)
    for g in groups[len(groups) // 10:]:
        rel1 = min(r[1] for r in g); endN = max(r[2] for r in g)
        i = bisect.bisect_right(ends, rel1) - 1
        j = bisect.bisect_left(rels, endN)
        if i < 0 or j >= len(rels):
            continue
        ref = ends[i]
        ph = [phase.get((key, r[3], r[2]), (0, 0)) for r in g]
        ts = [p[0] for p in ph if p[0]]; tm = [p[1] for p in ph if p[1]]
        d = rows[len(g)]
        us = lambda t: (t - ref) / 1e3
        d['start1'].append(us(min(r[0] for r in g))); d['rel1'].append(us(rel1)); d['relN'].append(us(max(r[1] for r in g)))
        if ts: d['tiles1'].append(us(min(ts))); d['tilesN'].append(us(max(ts)))
        if tm: d['merged'].append(us(max(tm)))
        d['end1'].append(us(min(r[2] for r in g))); d['endN'].append(us(endN)); d['wo_rel1'].append(us(rels[j]))
        cs = [(r, cyc[(key, r[3], r[2])]) for r in g if (key, r[3], r[2]) in cyc]
        if cs:
            c = crow[len(g)]
            for n, col in enumerate(('c_rel', 'c_tiles', 'c_merged', 'c_end')):
                v = [x[1][n] for x in cs if x[1][n]]
                if v: c[col].append(st.median(v))
            ns_sum += sum(r[2] - r[0] for r, _ in cs); cyc_sum += sum(x[3] for _, x in cs)
cols = ['start1', 'rel1', 'relN', 'tiles1', 'tilesN', 'merged', 'end1', 'endN', 'wo_rel1']
print('| blocks | launches | %s |' % ' | '.join(cols))
print('| ---: | ---: |%s' % (' ---: |' * len(cols)))
for nb in sorted(rows):
    d = rows[nb]
    print('| %d | %d | %s |' % (nb, len(d['endN']), ' | '.join('%.2f' % st.median(d[c]) if d[c] else '-' for c in cols)))
if crow and cyc_sum:
    ghz = cyc_sum / ns_sum
    ccols = ['c_rel', 'c_tiles', 'c_merged', 'c_end']
    print('cycles after each block\'s start (blocks\' medians, median over launches); us at %.3f GHz' % ghz)
    print('| blocks | launches | %s |' % ' | '.join(ccols))
    print('| ---: | ---: |%s' % (' ---: |' * len(ccols)))
    for nb in sorted(crow):
        c = crow[nb]
        print('| %d | %d | %s |' % (nb, len(c['c_end']), ' | '.join(
            '%d (%.2f)' % (st.median(c[k]), st.median(c[k]) / ghz / 1e3) if c[k] else '-' for k in ccols)))
