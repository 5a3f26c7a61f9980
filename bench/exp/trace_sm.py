# bench/exp/trace_sm.py FILE [BLOCKS...]: trace.patch's ring (RL_EXP_TRACE) by SM, read by
# trace_agg.py's load(). For the launches whose grid has each of BLOCKS blocks (default: every
# grid size seen), each SM's mean
# start, release (after the PDL wait) and end, in us after the launch's first block ended (end)
# or first block was released (start, release), the share of launches it hosted a block in, and
# the split-half correlation of the per-SM mean end over alternate launches: near 1, the late
# blocks are late on the same SMs launch after launch (PERF.md v2.45: 7B gate + up, 1.000).
import sys, statistics as st, collections
from trace_agg import load  # the same records and launches as the time line's table

launches = collections.defaultdict(list)  # by grid size
for _, x in load(sys.argv[1])[3]:
    launches[len(x)].append(x)
want = [int(b) for b in sys.argv[2:]] or sorted(b for b in launches if len(launches[b]) >= 8)
for nb in want:
    L = launches.get(nb, [])
    if not L:
        print('%d blocks: no launches' % nb); continue
    per = collections.defaultdict(lambda: collections.defaultdict(list))
    for j, x in enumerate(L):
        e0 = min(r[4] for r in x); w0 = min(r[3] for r in x)
        for t0, sm, b, t1, t2 in x:
            d = per[sm]
            d['start'].append((t0 - w0) / 1e3); d['release'].append((t1 - w0) / 1e3)
            d['end'].append((t2 - e0) / 1e3); d['half%d' % (j % 2)].append((t2 - e0) / 1e3)
    sms = sorted(per, key=lambda s: st.mean(per[s]['end']))
    a = [st.mean(per[s]['half0']) for s in sms if per[s]['half0'] and per[s]['half1']]
    b = [st.mean(per[s]['half1']) for s in sms if per[s]['half0'] and per[s]['half1']]
    ma, mb = st.mean(a), st.mean(b)
    den = (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
    r = sum((x - ma) * (y - mb) for x, y in zip(a, b)) / den if den else float('nan')
    print('%d blocks: %d launches on %d SMs; split-half correlation of the per-SM mean end %.3f' % (nb, len(L), len(per), r))
    print('| SM | hosted | start | release | end |')
    print('| ---: | ---: | ---: | ---: | ---: |')
    for s in (sms[:6] + ['...'] + sms[-6:] if len(sms) > 12 else sms):
        if s == '...':
            print('| ... | | | | |'); continue
        d = per[s]
        print('| %d | %.2f | %.2f | %.2f | %.2f |' % (s, len(d['end']) / len(L), st.mean(d['start']), st.mean(d['release']), st.mean(d['end'])))
