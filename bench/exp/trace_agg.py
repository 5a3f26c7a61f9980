# bench/exp/trace_agg.py FILE [PER_LAYER] [SKIP]: the decode graph's streamed launches on one
# time line, from trace.patch's RL_EXP_TRACE file (see its mvs.cu comment). A launch is one
# matrix's blocks within one token: its records share the first matrix's address, and a token
# uses each matrix once, so a key's records split into launches where their starts jump by more
# than half a token. Per position in the token (launch i of PER_LAYER in a layer: 4 for
# QKV / Wo / gate + up / down; launches after the layers' apart, as 'last K'), the median over
# tokens (the first SKIP left out) of, in us:
#   blocks  records of the launch (its grid);
#   start   its first block's start after the previous launch's last block ended (< 0: PDL);
#   wait1   its first block's release from the PDL wait after that end;
#   waitN   its last block's release after that end;
#   end1    its first block's end after that end;
#   endN    its last block's end after that end (the launch's share of the token);
#   tail    endN - end1: how unevenly its blocks finish.
# load() is shared with bench/exp/trace_sm.py.
import struct, sys, statistics as st, collections


def load(fn):
    """(records written, ring capacity, token length in ns, launches): each launch a list of
    its blocks' records (start, smid, block, released, end), the launches in time order."""
    raw = open(fn, 'rb').read()
    n, cap = struct.unpack_from('<QQ', raw, 0)
    bykey = collections.defaultdict(list)
    for i in range((len(raw) - 16) // 40):
        k, sb, t0, t1, t2 = struct.unpack_from('<5Q', raw, 16 + 40 * i)
        if k >> 62:  # att-trace.patch's flash decode records (bench/exp/trace_att.py)
            continue
        bykey[k].append((t0, sb >> 32, sb & 0xffffffff, t1, t2))
    if not bykey:
        return n, cap, 0, []
    # a token's length: the most frequent key's launches are a token apart
    starts = sorted(r[0] for r in bykey[max(bykey, key=lambda k: len(bykey[k]))])
    gaps = sorted(b - a for a, b in zip(starts, starts[1:]) if b - a > 20000)
    tok = gaps[len(gaps) // 2] if gaps else 10**9
    launches = []
    for k, rs in bykey.items():
        rs.sort()
        cur = [rs[0]]
        for r in rs[1:]:
            if r[0] - cur[0][0] > tok / 2:
                launches.append((k, cur)); cur = [r]
            else:
                cur.append(r)
        launches.append((k, cur))
    launches.sort(key=lambda x: x[1][0][0])
    return n, cap, tok, launches


def main():
    fn = sys.argv[1]
    per = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    skip = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    n, cap, tok, launches = load(fn)
    print('%s: %d records written, %d kept (ring of %d)' % (fn, n, sum(len(rs) for _, rs in launches), cap))
    # tokens: runs of launches that start again at the graph's first key
    first_key = launches[0][0] if launches else None
    tokens, cur = [], []
    for k, rs in launches:
        if k == first_key and cur:
            tokens.append(cur); cur = []
        cur.append(rs)
    if cur: tokens.append(cur)
    L = collections.Counter(len(t) for t in tokens).most_common(1)[0][0] if tokens else 0
    full = [t for t in tokens if len(t) == L][skip:]
    print('token %.1f us, %d launches a token, %d tokens (%d used)' % (tok / 1e3, L, len(tokens), len(full)))
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    for t in full:
        prev_end = None
        for i, rs in enumerate(t):
            s0 = min(r[0] for r in rs); w1 = min(r[3] for r in rs); wn = max(r[3] for r in rs)
            e1 = min(r[4] for r in rs); en = max(r[4] for r in rs)
            if prev_end is not None:
                d = rows[i % per if i < L - L % per else 'last %d' % (L - i)]
                d['blocks'].append(len(rs)); d['start'].append((s0 - prev_end) / 1e3)
                d['wait1'].append((w1 - prev_end) / 1e3); d['waitN'].append((wn - prev_end) / 1e3)
                d['end1'].append((e1 - prev_end) / 1e3); d['endN'].append((en - prev_end) / 1e3)
                d['tail'].append((en - e1) / 1e3)
            prev_end = en
    cols = ['blocks', 'start', 'wait1', 'waitN', 'end1', 'endN', 'tail']
    print('| launch (i of %d) | %s |' % (per, ' | '.join(cols)))
    print('| --- |%s' % (' ---: |' * len(cols)))
    for i in sorted(rows, key=str):
        print('| %s | %s |' % (i, ' | '.join('%.2f' % st.median(rows[i][c]) for c in cols)))


if __name__ == '__main__':
    main()
