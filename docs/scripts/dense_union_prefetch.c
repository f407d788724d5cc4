/* The dense-output union with the output row prefetched ahead: C prototypes for docs/passes.md
   ("Prefetching the output row ahead"),
   driven by dense_union_prefetch.py. out[i, :] += B[i, :] + C[i, :] in the plain sparsifier's arithmetic. */
#include <stdint.h>
#define PF_LINES(row_next, n) do { const char *p_ = (const char *)(row_next); \
    for (long l_ = 0; l_ < (n) * 8; l_ += 64) __builtin_prefetch(p_ + l_, 1, 3); } while (0)
void merge_add(const int32_t *bp, const int32_t *bc, const double *bv, const int32_t *cp, const int32_t *cc,
               const double *cv, long m, long n, double *out, long D) {
    for (long i = 0; i < m; i++) {
        double *row = out + i * n;
        if (D > 0 && i + D < m) PF_LINES(out + (i + D) * n, n);
        long kb = bp[i], eb = bp[i + 1], kc = cp[i], ec = cp[i + 1];
        while (kb < eb && kc < ec) {
            long jb = bc[kb], jc = cc[kc];
            if (jb == jc) { row[jb] += bv[kb] + cv[kc]; kb++; kc++; }
            else if (jb < jc) { row[jb] += bv[kb]; kb++; }
            else { row[jc] += cv[kc]; kc++; }
        }
        for (; kb < eb; kb++) row[bc[kb]] += bv[kb];
        for (; kc < ec; kc++) row[cc[kc]] += cv[kc];
    }
}
void spa_add(const int32_t *bp, const int32_t *bc, const double *bv, const int32_t *cp, const int32_t *cc,
             const double *cv, long m, long n, double *out, int64_t *tagc, int32_t *atc, int64_t *tagb, long D) {
    double dummy[2];
    for (long i = 0; i < m; i++) {
        double *row = out + i * n;
        if (D > 0 && i + D < m) PF_LINES(out + (i + D) * n, n);
        for (long k = cp[i]; k < cp[i + 1]; k++) { long j = cc[k]; tagc[j] = i; atc[j] = (int32_t)k; }
        for (long k = bp[i]; k < bp[i + 1]; k++) {
            long j = bc[k];
            int hit = tagc[j] == i;
            double c = cv[hit ? atc[j] : 0];
            double o = row[j], b = bv[k];
            double both = o + (b + c), only = o + b;
            row[j] = hit ? both : only;
            tagb[j] = i;
        }
        for (long k = cp[i]; k < cp[i + 1]; k++) {
            long j = cc[k];
            int hit = tagb[j] == i;
            double *p = hit ? dummy : row + j;
            *p = *p + cv[k];
        }
    }
}
/* the floor: RMW of the union's entries only */
void floor_add(const int32_t *up, const int32_t *uc, const double *uv, long m, long n, double *out, long D) {
    for (long i = 0; i < m; i++) {
        double *row = out + i * n;
        if (D > 0 && i + D < m) PF_LINES(out + (i + D) * n, n);
        for (long k = up[i]; k < up[i + 1]; k++) row[uc[k]] += uv[k];
    }
}

#define PF_CRD(rowp, cp_, cc_, r) do { for (long q_ = (cp_)[r]; q_ < (cp_)[(r) + 1]; q_++) __builtin_prefetch((rowp) + (cc_)[q_], 1, 3); } while (0)
void merge_add_c(const int32_t *bp, const int32_t *bc, const double *bv, const int32_t *cp, const int32_t *cc,
               const double *cv, long m, long n, double *out, long D) {
    for (long i = 0; i < m; i++) {
        double *row = out + i * n;
        if (i + D < m) { PF_CRD(out + (i + D) * n, bp, bc, i + D); PF_CRD(out + (i + D) * n, cp, cc, i + D); }
        long kb = bp[i], eb = bp[i + 1], kc = cp[i], ec = cp[i + 1];
        while (kb < eb && kc < ec) {
            long jb = bc[kb], jc = cc[kc];
            if (jb == jc) { row[jb] += bv[kb] + cv[kc]; kb++; kc++; }
            else if (jb < jc) { row[jb] += bv[kb]; kb++; }
            else { row[jc] += cv[kc]; kc++; }
        }
        for (; kb < eb; kb++) row[bc[kb]] += bv[kb];
        for (; kc < ec; kc++) row[cc[kc]] += cv[kc];
    }
}
void spa_add_c(const int32_t *bp, const int32_t *bc, const double *bv, const int32_t *cp, const int32_t *cc,
             const double *cv, long m, long n, double *out, int64_t *tagc, int32_t *atc, int64_t *tagb, long D) {
    double dummy[2];
    for (long i = 0; i < m; i++) {
        double *row = out + i * n;
        if (i + D < m) { PF_CRD(out + (i + D) * n, bp, bc, i + D); PF_CRD(out + (i + D) * n, cp, cc, i + D); }
        for (long k = cp[i]; k < cp[i + 1]; k++) { long j = cc[k]; tagc[j] = i; atc[j] = (int32_t)k; }
        for (long k = bp[i]; k < bp[i + 1]; k++) {
            long j = bc[k];
            int hit = tagc[j] == i;
            double c = cv[hit ? atc[j] : 0];
            double o = row[j], b = bv[k];
            double both = o + (b + c), only = o + b;
            row[j] = hit ? both : only;
            tagb[j] = i;
        }
        for (long k = cp[i]; k < cp[i + 1]; k++) {
            long j = cc[k];
            int hit = tagb[j] == i;
            double *p = hit ? dummy : row + j;
            *p = *p + cv[k];
        }
    }
}
void floor_add_c(const int32_t *up, const int32_t *uc, const double *uv, long m, long n, double *out, long D) {
    for (long i = 0; i < m; i++) {
        double *row = out + i * n;
        if (i + D < m) PF_CRD(out + (i + D) * n, up, uc, i + D);
        for (long k = up[i]; k < up[i + 1]; k++) row[uc[k]] += uv[k];
    }
}
/* one 8-byte mark per column: (row << 32) | (1 << 31 if B consumed it) | position in C */
void spa1_add(const int32_t *bp, const int32_t *bc, const double *bv, const int32_t *cp, const int32_t *cc,
             const double *cv, long m, long n, double *out, uint64_t *mark, long D) {
    double dummy[2];
    for (long i = 0; i < m; i++) {
        double *row = out + i * n;
        if (D > 0 && i + D < m) PF_LINES(out + (i + D) * n, n);
        uint64_t tag = (uint64_t)i << 32;
        for (long k = cp[i]; k < cp[i + 1]; k++) mark[cc[k]] = tag | (uint64_t)k;
        for (long k = bp[i]; k < bp[i + 1]; k++) {
            long j = bc[k];
            uint64_t t = mark[j];
            int hit = (t >> 32) == (uint64_t)i;
            double c = cv[hit ? (long)(t & 0x7fffffffu) : 0];
            double o = row[j], b = bv[k];
            double both = o + (b + c), only = o + b;
            row[j] = hit ? both : only;
            mark[j] = t | ((uint64_t)hit << 31);
        }
        for (long k = cp[i]; k < cp[i + 1]; k++) {
            long j = cc[k];
            int used = (mark[j] >> 31) & 1;
            double *p = used ? dummy : row + j;
            *p = *p + cv[k];
        }
    }
}
