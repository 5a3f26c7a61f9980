# mvxr.patch's per-warp copies and reads (mvx.cu's RES layout since session 36; and the dropped
# mvxa.patch's activation pieces; both patches in git history at a3f9100), simulated on
# the host: for every warp, round and slot, every byte the kernel body reads from its stage (A
# words, fp16 scales, activation fragments) must be the one of its chunk in global memory that
# the cursor copied there. Prints "QB nch bad" and "acts nch bad" (bad = 0).
# python3 bench/exp/mvxr_sim.py
def check(QB, nch, W=8, SL=4):
    PPR = SL*QB//16; PPL = 16*PPR//32; PPC = QB//16; WROW = SL*QB+16
    R = (nch+31)//32
    bad = 0
    for warp in range(W):
        for rnd in range(R):
            st = {}  # stage byte -> ('q', row, byteoff in row) or ('s', row, byte)
            for lane in range(32):
                for j in range(PPL):
                    p = lane + 32*j; k = p % PPR; row = p // PPR
                    src = (warp + W*(k//PPC))*QB + 16*(k % PPC) + rnd*32*QB
                    if 32*rnd + warp + W*(k//PPC) < nch:
                        for b in range(16): st[row*WROW + 16*k + b] = ('q', row, src+b)
                for j in range(2):
                    p = lane + 32*j; row = p//4; slot = p % 4
                    c = 32*rnd + (warp & ~1) + W*slot
                    left = 2*(nch-c) if c < nch else 0
                    src = 2*((warp & ~1) + W*slot) + 64*rnd
                    for b in range(4):
                        st[16*WROW + 4*p + b] = ('s', row, src+b) if b < left else ('z',)
            # reads
            for k in range(SL):
                c = 32*rnd + warp + 8*k
                if c >= nch: continue
                for g in range(8):
                    for rr in (g, g+8):
                        for t in range(4):
                            words = [t] if QB == 16 else [t, 4+t]
                            for wd in words:
                                for b in range(4):
                                    off = rr*WROW + k*QB + 4*wd + b
                                    exp = ('q', rr, c*QB + 4*wd + b)
                                    if st.get(off) != exp: bad += 1
                        # scale: uint16 index rr*8 + 2k + (warp&1)
                        for b in range(2):
                            off = 16*WROW + 2*(rr*8 + 2*k + (warp & 1)) + b
                            if st.get(off) != ('s', rr, 2*c + b): bad += 1
    return bad
for QB in (16, 32):
    for nch in (5, 64, 70, 128, 344, 33, 1):
        print(QB, nch, check(QB, nch))

# mvxa.patch (on top of mvxr.patch): each stage also holds the warp's 4 chunks' activation
# fragments (MVX_FRAG = 640 bytes each), copied in 16-byte pieces; the body's loads (B words at
# 16 lane, d_x at 512 + 32 t, terms at 512 + 32 t + 16) must read the chunk's own bytes
def check_acts(nch, W=8, SL=4, FR=640):
    PF = FR // 16; bad = 0
    for warp in range(W):
        for rnd in range((nch + 31) // 32):
            st = {}
            c0 = 32*rnd + warp
            for lane in range(32):
                for j in range(SL*PF//32):
                    p = lane + 32*j; k = p // PF; o = 16*(p % PF)
                    if c0 + W*k < nch:
                        for b in range(16): st[k*FR + o + b] = (c0 + W*k)*FR + o + b
            for k in range(SL):
                c = c0 + W*k
                if c >= nch: continue
                for lane in range(32):
                    t = lane % 4
                    for base, size in ((16*lane, 16), (512 + 32*t, 16), (512 + 32*t + 16, 16)):
                        for b in range(size):
                            if st.get(k*FR + base + b) != c*FR + base + b: bad += 1
    return bad
for nch in (5, 64, 70, 128, 344, 33, 1):
    print("acts", nch, check_acts(nch))
