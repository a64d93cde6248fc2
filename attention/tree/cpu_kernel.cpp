// CPU kernel of tree / bud-expansion attention (Algorithm 1 of "High Attention Scores and Where to
// Find Them"), one query per iteration, queries spread over ATen's intra-op threads.
//
// Specification: reference.py (conventions) and samplers.py (masses, random draws); this file must
// give the same buds for the same seed. Python side: cpu.py (compiles and loads this, passes the
// n_terms table of schedule.py). The seed passed in already contains the layer index
// (samplers.layer_seed), so the layers of a model draw independently.
//
// Two entry points share one per-query function (QueryWorker::query: Algorithm 1 for one query
// over given level tables, class NodeTables): "forward" (the whole sequence; builds its level tables,
// class LevelTables, queries over threads) and "decode_step" (the decode path, decode.py: the new
// query of every batch element over the persistent node tables of decode.TreeDecodeState, read in
// place, batch elements over threads; tree_decode_step below documents its layout).
//
// Precision (scalar_t = the dtype of q, k, v: float or double): key / value level tables, the
// query-key-sum inner products and the weighted sum of value sums run in scalar_t; alignments are
// stored in double from there on (so Eq. 2's subtraction is in double), and feature tables, feature
// alignments, masses, Gumbel noise and the softmax weights are double (weights are rounded to
// scalar_t before the value sum).
//
// Data layout (all contiguous):
//   q, k, v      (B, H, T, D) scalar_t          queries, keys, values
//   qf, kf       (B, H, T, R) double            feature-mapped queries / keys (feature samplers only)
//   terms        (T + 1,) int64                 n_terms(l) = ceil(l^E) for every history length l = 0..T
//   out          (B, H, T, D) scalar_t          attention output
//   info         (B, T, 3) int64                initial buds, splits, final buds per query
// Level tables (Eq. 1, class LevelTables): the leaves are k, v (and kf) themselves; the internal
// nodes of levels 1 .. log2 L are built here into (B, L-1, H, X), rows [L - 2L/2^h, L - L/2^h) for
// level h, one node's heads together, in a workspace kept per calling thread and reused by the
// next call (a fresh table of several MB costs more in page faults than the build itself). Only
// nodes that end within [0, T) are built. A node that contains the history end (leaf l-1) but
// extends past it is "incomplete": its sum over the history [start, l) is that of complete nodes
// along the path of leaf l-1 ("pieces", class PathAlignments), whose alignments with the query and
// whose value rows are summed instead of composing the node's key and value sums.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

// glibc's vector math (libmvec): lets the compiler vectorise exp / log in `omp simd` loops
#if defined(TREE_USE_LIBMVEC)
extern "C" {
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
double log(double);
}
#endif

// Profile build (cpu.load_kernel(profile=True) compiles with -DTREE_PROFILE): time stamp counters
// per phase and operation counts, summed over calls until read by the module's `profile()`.
// Without the flag the TREE_* macros are empty and nothing of this is compiled in.
#if defined(TREE_PROFILE)
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#endif

namespace {

#if defined(TREE_PROFILE)
enum Phase { kAlloc = 0, kBuild, kQueryInit, kKeys, kSelect, kExpand, kPathAlign, kSoftmax, kValues, kQueries, kPhases };
const char* const kPhaseNames[kPhases] = {"alloc", "build_levels", "query_init", "sampling_keys", "select_top_p",
                                          "expand", "path_alignments", "softmax_weights", "value_sum", "queries_total"};
enum Count { kNQueries = 0, kNRounds, kNDraws, kNLogMass, kNInnerProducts, kNPathPieces, kNMoves, kNFinalBuds, kCounts };
const char* const kCountNames[kCounts] = {"queries", "rounds", "gumbel_draws", "log_mass_evaluations",
                                          "inner_products", "path_pieces", "authors_moves", "final_buds"};
struct Profile {
  uint64_t ticks[kPhases] = {};
  int64_t counts[kCounts] = {};
  void merge(const Profile& o) {
    for (int i = 0; i < kPhases; ++i) ticks[i] += o.ticks[i];
    for (int i = 0; i < kCounts; ++i) counts[i] += o.counts[i];
  }
};
Profile g_profile;
std::mutex g_profile_mutex;

inline uint64_t prof_clock() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
#endif
}
thread_local Profile t_profile;  // this thread's sums, merged into g_profile by flush_profile()

void flush_profile() {
  std::lock_guard<std::mutex> lock(g_profile_mutex);
  g_profile.merge(t_profile);
  t_profile = Profile();
}
#define TREE_TIC(var) const uint64_t var = prof_clock()
#define TREE_TOC(phase, var) (t_profile.ticks[phase] += prof_clock() - (var))
#define TREE_COUNT(c, n) (t_profile.counts[c] += (n))
#else
#define TREE_TIC(var)
#define TREE_TOC(phase, var)
#define TREE_COUNT(c, n)
#endif

constexpr double kLogMassFloor = -9000.0;  // samplers.LOG_MASS_FLOOR
constexpr double kLogMassCeil = 9000.0;    // samplers.LOG_MASS_CEIL
constexpr double kZeroMassKey = -10000.0;  // samplers.ZERO_MASS_KEY
constexpr double kInf = std::numeric_limits<double>::infinity();

// order of samplers.SAMPLERS
enum Sampler { kUniform = 0, kEdh, kAlignment, kPositiveAlignment, kRff, kFavorPlus, kFavorPlusRelu };

// splitmix64 finaliser, as samplers._mix
inline uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// samplers.hash_uniform(seed, batch, query, rnd, start) given h_query = hash of (seed, batch, query)
inline double hash_uniform(uint64_t h_query, int64_t rnd, int64_t start) {
  const uint64_t h = mix(mix(h_query ^ static_cast<uint64_t>(rnd)) ^ static_cast<uint64_t>(start));
  return (static_cast<double>(h >> 11) + 0.5) * 0x1p-53;
}

// Node sums of one level of the tree as rows of H vectors of X numbers, head hh of a row at
// p + hh * head_stride: leaves are the input itself (B, H, T, X) (head stride T X), internal nodes
// are rows of the level table (head stride X).
template <typename Num>
struct Row {
  const Num* p;
  int64_t head_stride;
};

// Inner product with independent partial sums per SIMD lane and a pairwise final reduction (GCC
// does not reorder a plain floating-point sum, which would stay one long dependency chain).
template <typename Num>
inline Num dot(const Num* a, const Num* b, int64_t n) {
  constexpr int kLanes = 32 / sizeof(Num);  // one 256-bit vector
  Num lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += a[i + j] * b[i + j];
  Num tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) lanes[j] += lanes[j + w];
  return lanes[0] + tail;
}

// Alignments of one node with the query for all heads: out[h] = <q_h, row_h> (q_h at q + h q_stride),
// in double. With AVX2 + FMA and D a multiple of the vector width, 8 (float) or 4 (double) heads at
// a time, their partial sums reduced together (one horizontal reduction per group instead of one
// per head); otherwise `dot` per head.
template <typename Num>
inline void alignments(double* out, const Num* q, int64_t q_stride, const Num* row, int64_t row_stride,
                       int64_t H, int64_t D) {
  for (int64_t h = 0; h < H; ++h) out[h] = static_cast<double>(dot(q + h * q_stride, row + h * row_stride, D));
}

#if defined(__AVX2__) && defined(__FMA__)
template <>
inline void alignments<float>(double* out, const float* q, int64_t q_stride, const float* row, int64_t row_stride,
                              int64_t H, int64_t D) {
  if (D % 8 != 0) {
    for (int64_t h = 0; h < H; ++h) out[h] = static_cast<double>(dot(q + h * q_stride, row + h * row_stride, D));
    return;
  }
  for (int64_t h0 = 0; h0 < H; h0 += 8) {
    const int g = static_cast<int>(std::min<int64_t>(8, H - h0));
    __m256 a[8];
    for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D; d += 8)
      for (int j = 0; j < g; ++j)
        a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (h0 + j) * q_stride + d),
                               _mm256_loadu_ps(row + (h0 + j) * row_stride + d), a[j]);
    // lane j of the result = sum of a[j]'s 8 lanes
    const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    const __m256 r = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
    alignas(32) double tmp[8];
    _mm256_store_pd(tmp, _mm256_cvtps_pd(_mm256_castps256_ps128(r)));
    _mm256_store_pd(tmp + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(r, 1)));
    std::copy_n(tmp, g, out + h0);
  }
}

template <>
inline void alignments<double>(double* out, const double* q, int64_t q_stride, const double* row,
                               int64_t row_stride, int64_t H, int64_t D) {
  if (D % 4 != 0) {
    for (int64_t h = 0; h < H; ++h) out[h] = dot(q + h * q_stride, row + h * row_stride, D);
    return;
  }
  for (int64_t h0 = 0; h0 < H; h0 += 4) {
    const int g = static_cast<int>(std::min<int64_t>(4, H - h0));
    __m256d a[4];
    for (int j = 0; j < 4; ++j) a[j] = _mm256_setzero_pd();
    for (int64_t d = 0; d < D; d += 4)
      for (int j = 0; j < g; ++j)
        a[j] = _mm256_fmadd_pd(_mm256_loadu_pd(q + (h0 + j) * q_stride + d),
                               _mm256_loadu_pd(row + (h0 + j) * row_stride + d), a[j]);
    const __m256d t0 = _mm256_hadd_pd(a[0], a[1]), t1 = _mm256_hadd_pd(a[2], a[3]);
    const __m256d r = _mm256_add_pd(_mm256_permute2f128_pd(t0, t1, 0x20), _mm256_permute2f128_pd(t0, t1, 0x31));
    alignas(32) double tmp[4];
    _mm256_store_pd(tmp, r);
    std::copy_n(tmp, g, out + h0);
  }
}
#endif

template <typename Num>
inline void add_into(Num* dst, const Num* a, const Num* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
}

// T, L, causal, exclude_self: the whole-sequence forward only (the decode step sets T = L = C, the
// capacity). levels: of the tree the queries read (log2 L + 1). Dv: value dimension (= D in the forward).
struct Params {
  int64_t B, T, H, D, Dv, R, L, levels, P;
  bool causal, exclude_self, bud_mean, authors_descent;
  int sampler;
  double scale, log_b, log1m_b;  // 1/sqrt(D), log b, log(1 - b) (EDH)
  uint64_t seed_hash;
};

// Offset of level h >= 1 among the internal nodes (level 1 first): rows [L - 2L/2^h, L - L/2^h).
inline int64_t internal_offset(int64_t L, int64_t h) { return L - (2 * L >> h); }

// dst (H, X) contiguous = a + b, head by head (the rows may have different head strides).
template <typename Num>
inline void add_rows(Num* dst, Row<Num> a, Row<Num> b, int64_t H, int64_t X) {
  for (int64_t h = 0; h < H; ++h) add_into(dst + h * X, a.p + h * a.head_stride, b.p + h * b.head_stride, X);
}

// Grow-only buffer per calling thread and slot, reused across calls: freshly allocated tables of
// several MB cost more in page faults (first touch) than building them.
template <typename Num>
Num* workspace(int slot, int64_t n) {
  thread_local std::vector<Num> buf[3];
  if (static_cast<int64_t>(buf[slot].size()) < n) {
    buf[slot].clear();
    buf[slot].shrink_to_fit();
    buf[slot].resize(n);
  }
  return buf[slot].data();
}

// Where the nodes of one tree's level tables live (a read-only view): node (h, j) of batch element
// b is a row of H vectors of X numbers. Level 0 (the leaves) and levels >= 1 (rows
// internal_offset(L, h) + j of an internal table, one node's heads together) have strides of their
// own, so that the whole-sequence forward (leaves = the input (B, H, T, X) itself, internal nodes in
// a workspace, class LevelTables) and the decode step (one persistent table (B, 2C - 1, H, X) of
// decode.TreeDecodeState, leaves first) share the per-query code (QueryWorker::query).
// partial: false when only nodes complete within the history [0, l) may be read (an incomplete
// node's sums come from its pieces, class PathAlignments); true when every node holds the sum over
// its leaves in [0, l) (the decode state: leaves from l on are empty, i.e. zero).
template <typename Num>
struct NodeTables {
  const Num* leaf = nullptr;
  int64_t leaf_batch = 0, leaf_pos = 0, leaf_head = 0;  // strides of level 0
  const Num* inner = nullptr;
  int64_t inner_batch = 0, L = 1;  // internal rows: H X numbers, head stride X; L leaves in all
  int64_t H = 0, X = 0;
  bool partial = false;

  Row<Num> row(int64_t b, int64_t h, int64_t j) const {
    if (h == 0) return {leaf + b * leaf_batch + j * leaf_pos, leaf_head};
    return {inner + b * inner_batch + (internal_offset(L, h) + j) * H * X, X};
  }
};

// The level tables of x (B, H, T, X) (Eq. 1: a parent is the sum of its two children). Leaves are
// read from x itself; the internal nodes (levels 1 .. log2 L) live in a workspace (B, L-1, H, X),
// one node's heads together. Only nodes complete within [0, T) are built: a node that extends past
// the history end is never read from the table (PathAlignments splits it into pieces), and l <= T.
template <typename Num>
class LevelTables {
 public:
  LevelTables(const Num* x, int64_t B, int64_t H, int64_t T, int64_t X, int64_t L, int slot)
      : x_(x), H_(H), T_(T), X_(X), L_(L), HX_(H * X) {
    TREE_TIC(t_alloc);
    tab_ = workspace<Num>(slot, std::max<int64_t>(1, B * (L - 1) * HX_));
    TREE_TOC(kAlloc, t_alloc);
    TREE_TIC(t_build);
    for (int64_t h = 1; (T >> h) >= 1; ++h) {
      const int64_t n = T >> h;  // complete nodes of level h
      at::parallel_for(0, B * n, 64, [&](int64_t a, int64_t e) {
        for (int64_t m = a; m < e; ++m) {
          const int64_t b = m / n, j = m % n;
          Num* dst = table(b) + (internal_offset(L, h) + j) * HX_;
          if (h == 1) {
            const Num* leaf = x_ + (b * H_ * T_ + 2 * j) * X_;
            add_rows(dst, Row<Num>{leaf, T_ * X_}, Row<Num>{leaf + X_, T_ * X_}, H_, X_);
          } else {
            const Num* child = table(b) + (internal_offset(L, h - 1) + 2 * j) * HX_;
            add_into(dst, child, child + HX_, HX_);
          }
        }
      });
    }
    TREE_TOC(kBuild, t_build);
  }

  // the view the queries read: nodes complete within [0, T) only (partial = false)
  NodeTables<Num> view() const {
    NodeTables<Num> v;
    v.leaf = x_;
    v.leaf_batch = H_ * T_ * X_;
    v.leaf_pos = X_;
    v.leaf_head = T_ * X_;
    v.inner = tab_;
    v.inner_batch = (L_ - 1) * HX_;
    v.L = L_;
    v.H = H_;
    v.X = X_;
    return v;
  }

 private:
  Num* table(int64_t b) const { return tab_ + b * (L_ - 1) * HX_; }
  const Num* x_;
  Num* tab_ = nullptr;
  int64_t H_, T_, X_, L_, HX_;
};

// The nodes that contain leaf p = l - 1 (the path of p) extend past the history end (except the
// leaf itself and nodes ending at l); such an "incomplete" node's sum over [start, l) is the sum of
// "pieces": leaf p and, for every level g below the node's where p's level-g node is a right child,
// that node's (complete) left sibling. Nothing is composed: alignments with the query are sums of
// the pieces' alignments (inner products are linear), a value sum is added piece by piece.
template <typename Num>
class PathAlignments {
 public:
  explicit PathAlignments(const Params& pr) : H_(pr.H), A_(pr.levels * pr.H), tmp_(pr.H) {}

  // q: (head 0 of) the query, head stride q_stride; X: vector length
  void reset(const NodeTables<Num>* tables, int64_t b, int64_t l, const Num* q, int64_t q_stride, int64_t X) {
    tables_ = tables;
    b_ = b;
    p_ = l - 1;
    q_ = q;
    q_stride_ = q_stride;
    X_ = X;
    done_ = -1;
  }

  // alignments (H,) of the query with the history part of p's level-h node
  const double* at(int h) {
    TREE_TIC(t0);
    if (done_ < 0) {  // the leaf itself
      const Row<Num> leaf = piece(0);
      alignments(A_.data(), q_, q_stride_, leaf.p, leaf.head_stride, H_, X_);
      done_ = 0;
    }
    for (; done_ < h; ++done_) {
      double* a = A_.data() + (done_ + 1) * H_;
      std::copy_n(A_.data() + done_ * H_, H_, a);
      if (has_piece(done_ + 1)) {
        const Row<Num> sib = piece(done_ + 1);
        alignments(tmp_.data(), q_, q_stride_, sib.p, sib.head_stride, H_, X_);
        for (int64_t hh = 0; hh < H_; ++hh) a[hh] += tmp_[hh];
        TREE_COUNT(kNPathPieces, 1);
      }
    }
    TREE_TOC(kPathAlign, t0);
    return A_.data() + h * H_;
  }

  // The pieces of p's level-h node: g = 0 is leaf p; g = 1 .. h is p's level-(g-1) node's left
  // sibling when that node is a right child (has_piece(g)).
  bool has_piece(int g) const { return g == 0 || ((p_ >> (g - 1)) & 1); }
  Row<Num> piece(int g) const {
    return g == 0 ? tables_->row(b_, 0, p_) : tables_->row(b_, g - 1, (p_ >> (g - 1)) - 1);
  }

 private:
  int64_t H_;
  std::vector<double> A_, tmp_;  // A_ (levels, H): row h valid for h <= done_
  const NodeTables<Num>* tables_ = nullptr;
  const Num* q_ = nullptr;
  int64_t b_ = 0, p_ = 0, q_stride_ = 0, X_ = 0;
  int done_ = -1;
};

// Algorithm 1 for one query at a time (reference.tree_attention_query), with reusable buffers.
template <typename scalar_t>
class QueryWorker {
 public:
  QueryWorker(const Params& pr, int64_t capacity)
      : pr_(pr), K_(pr), F_(pr),
        level_(capacity), index_(capacity), count_(capacity), log_count_(capacity), logm_(capacity),
        logm_ready_(capacity), A_(capacity * pr.H), Af_(capacity * pr.H), keys_(capacity), cand_(capacity),
        noise_(capacity), w_(capacity * pr.H), head_tmp_(pr.H), head_max_(pr.H), head_sum_(pr.H),
        acc_(pr.H * pr.Dv), weight_(capacity * pr.H), value_rows_(capacity + pr.levels), value_bud_(capacity + pr.levels) {}

  // Whole-sequence forward: query position t of batch element bi, history l by the causal /
  // exclude_self rule and n_terms = terms[l]; q, qf point at (bi, head 0, t) of (B, H, T, X)
  // tensors, out at the same place of the output. Writes info_row = (initial buds, splits, final buds).
  void run(int64_t bi, int64_t t, const scalar_t* q, const NodeTables<scalar_t>& ktab,
           const NodeTables<scalar_t>& vtab, const double* qf, const NodeTables<double>* ftab,
           const int64_t* terms, scalar_t* out, int64_t* info_row) {
    const int64_t l = pr_.causal ? (pr_.exclude_self ? t : t + 1) : pr_.T;
    if (l == 0) {
      TREE_COUNT(kNQueries, 1);
      for (int64_t h = 0; h < pr_.H; ++h) std::fill_n(out + h * pr_.T * pr_.Dv, pr_.Dv, scalar_t(0));
      info_row[0] = info_row[1] = info_row[2] = 0;
      return;
    }
    query(bi, t, l, terms[l], q, pr_.T * pr_.D, qf, pr_.T * pr_.R, ktab, vtab, ftab, out, pr_.T * pr_.Dv, info_row);
  }

  // Algorithm 1 for one query over given level tables: the one function of the whole-sequence
  // forward (run) and of the decode step (decode_all). bi: batch element (selects the tables' rows
  // and, with pos, the draws); pos: the query's position (draws only); l >= 1: history length (keys
  // 0..l-1); n_terms in [1, l]. q: head 0 of the query, head h at q + h q_stride (D numbers); qf
  // likewise (R numbers, feature samplers, else unused); out: head h at out + h out_stride (Dv
  // numbers). Writes info_row = (initial buds, splits, final buds).
  void query(int64_t bi, int64_t pos, int64_t l, int64_t n_terms, const scalar_t* q, int64_t q_stride,
             const double* qf, int64_t qf_stride, const NodeTables<scalar_t>& ktab, const NodeTables<scalar_t>& vtab,
             const NodeTables<double>* ftab, scalar_t* out, int64_t out_stride, int64_t* info_row) {
    TREE_TIC(t_query);
    TREE_COUNT(kNQueries, 1);
    l_ = l;
    q_ = q;
    q_stride_ = q_stride;
    qf_ = qf;
    qf_stride_ = qf_stride;
    use_f_ = pr_.sampler >= kPositiveAlignment;
    ktab_ = &ktab;
    vtab_ = &vtab;
    ftab_ = ftab;
    bi_ = bi;
    K_.reset(&ktab, bi, l_, q, q_stride, pr_.D);
    if (use_f_) F_.reset(ftab, bi, l_, qf, qf_stride, pr_.R);
    // initial buds (reference.initial_width): w = max(1, 2^ceil(log2 l) / 2^floor(log2 P))
    const int64_t w = std::max<int64_t>(1, (int64_t(1) << ceil_log2(l_)) >> floor_log2(pr_.P));
    const int h0 = floor_log2(w);
    const int64_t n0 = (l_ + w - 1) / w;
    nb_ = 0;
    for (int64_t j = 0; j < n0; ++j) add_bud(h0, j);
    TREE_TOC(kQueryInit, t_query);
    const uint64_t h_query = mix(mix(pr_.seed_hash ^ static_cast<uint64_t>(bi)) ^ static_cast<uint64_t>(pos));
    int64_t splits = 0;
    for (int64_t rnd = 0; nb_ < n_terms; ++rnd) {
      // Gumbel-top-k keys of the expandable buds (samplers.sampling_keys)
      TREE_TIC(t_keys);
      TREE_COUNT(kNRounds, 1);
      int64_t n_exp = 0;
      for (int64_t i = 0; i < nb_; ++i) {
        if (count_[i] < 2) continue;
        if (!logm_ready_[i]) {
          logm_[i] = log_mass(i);
          TREE_COUNT(kNLogMass, 1);
          logm_ready_[i] = 1;
        }
        noise_[n_exp] = hash_uniform(h_query, rnd, start(i));
        cand_[n_exp++] = i;
      }
      TORCH_CHECK(n_exp > 0, "tree attention: no expandable bud left with ", nb_, " < n_terms=", n_terms,
                  " buds (history length ", l_, ")");
      double* g = noise_.data();
#pragma omp simd
      for (int64_t c = 0; c < n_exp; ++c) g[c] = -std::log(-std::log(g[c]));
      for (int64_t c = 0; c < n_exp; ++c) {
        const int64_t i = cand_[c];
        keys_[i] = (logm_[i] == -kInf ? kZeroMassKey : logm_[i]) + g[c];
      }
      TREE_COUNT(kNDraws, n_exp);
      TREE_TOC(kKeys, t_keys);
      TREE_TIC(t_select);
      const int64_t k = std::min<int64_t>(pr_.P, n_exp);
      std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.begin() + n_exp,
                        [&](int64_t a, int64_t b) { return keys_[a] > keys_[b]; });
      TREE_TOC(kSelect, t_select);
      TREE_TIC(t_expand);
      const int64_t nb_before = nb_;
      for (int64_t c = 0; c < k; ++c) expand(cand_[c]);
      splits += nb_ - nb_before;
      TREE_TOC(kExpand, t_expand);
    }
    write_output(out, out_stride);
    TREE_COUNT(kNFinalBuds, nb_);
    TREE_TOC(kQueries, t_query);
    info_row[0] = n0;
    info_row[1] = splits;
    info_row[2] = nb_;
  }

 private:
  static int floor_log2(int64_t x) { return 63 - __builtin_clzll(static_cast<uint64_t>(x)); }
  static int ceil_log2(int64_t x) { return x <= 1 ? 0 : floor_log2(x - 1) + 1; }

  int64_t start(int64_t i) const { return index_[i] << level_[i]; }
  // non-empty leaves of node (h, j) for the current history length
  int64_t count(int h, int64_t j) const {
    return std::min<int64_t>(int64_t(1) << h, std::max<int64_t>(0, l_ - (j << h)));
  }
  bool complete(int h, int64_t j) const { return ((j + 1) << h) <= l_; }
  // whether node (h, j)'s own row in the tables holds its sums over the history
  bool readable(const NodeTables<scalar_t>& tab, int h, int64_t j) const { return tab.partial || complete(h, j); }


  void set_node(int64_t i, int h, int64_t j) {
    level_[i] = h;
    index_[i] = j;
    count_[i] = count(h, j);
    logm_ready_[i] = 0;
  }

  // Append bud (h, j); its alignments cost one inner product per head with the node's key sum.
  void add_bud(int h, int64_t j) {
    const int64_t H = pr_.H, D = pr_.D, R = pr_.R;
    const int64_t i = nb_++;
    set_node(i, h, j);
    TREE_COUNT(kNInnerProducts, H);
    if (readable(*ktab_, h, j)) {
      const Row<scalar_t> ks = ktab_->row(bi_, h, j);
      alignments(&A_[i * H], q_, q_stride_, ks.p, ks.head_stride, H, D);
    } else {
      std::copy_n(K_.at(h), H, &A_[i * H]);
    }
    if (use_f_) {
      if (ftab_->partial || complete(h, j)) {
        const Row<double> fs = ftab_->row(bi_, h, j);
        for (int64_t hh = 0; hh < H; ++hh) Af_[i * H + hh] = dot(qf_ + hh * qf_stride_, fs.p + hh * fs.head_stride, R);
      } else {
        std::copy_n(F_.at(h), H, &Af_[i * H]);
      }
    }
  }

  // Expand the sampled bud i (reference.tree_attention_query). If its right child is empty:
  // descent "authors" moves it to its left child (same sums and mass, nothing appended);
  // "split" descends until the right child is non-empty. A split: the left child replaces the
  // parent (alignment = parent - right, Eq. 2) and the right child is appended.
  void expand(int64_t i) {
    const int64_t H = pr_.H;
    int h = level_[i];
    int64_t j = index_[i];
    if (pr_.authors_descent && count(h - 1, 2 * j + 1) == 0) {
      level_[i] = h - 1;
      index_[i] = 2 * j;
      TREE_COUNT(kNMoves, 1);
      return;
    }
    while (count(h - 1, 2 * j + 1) == 0) {
      --h;
      j *= 2;
    }
    const int64_t r = nb_;
    add_bud(h - 1, 2 * j + 1);  // the right child: one inner product per head
    set_node(i, h - 1, 2 * j);
    for (int64_t hh = 0; hh < H; ++hh) A_[i * H + hh] -= A_[r * H + hh];
    if (use_f_)
      for (int64_t hh = 0; hh < H; ++hh) Af_[i * H + hh] -= Af_[r * H + hh];
  }

  // log(sum_h exp(x_h)) of x = head_tmp_, as torch.logsumexp
  double logsumexp_heads() {
    const int64_t H = pr_.H;
    double* x = head_tmp_.data();
    double m = -kInf;
    for (int64_t h = 0; h < H; ++h) m = std::max(m, x[h]);
    if (std::isinf(m)) return m;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t h = 0; h < H; ++h) s += std::exp(x[h] - m);
    return m + std::log(s);
  }

  // samplers.log_mass for bud i
  double log_mass(int64_t i) {
    const int64_t H = pr_.H;
    const double c = static_cast<double>(count_[i]);
    const double* A = &A_[i * H];
    const double* Af = &Af_[i * H];
    double out = 0.0;
    switch (pr_.sampler) {
      case kUniform:
        break;
      case kEdh:
        out = (static_cast<double>(l_ - start(i) - count_[i])) * pr_.log_b + std::log1p(-std::exp(c * pr_.log_b)) -
              pr_.log1m_b;
        break;
      case kAlignment:
        for (int64_t h = 0; h < H; ++h) head_tmp_[h] = pr_.scale * A[h] / c;
        out = logsumexp_heads();
        break;
      case kPositiveAlignment:
        for (int64_t h = 0; h < H; ++h) head_tmp_[h] = Af[h] / c;
        out = logsumexp_heads();
        break;
      default: {  // rff, favor_plus, favor_plus_relu: log(sum_h relu(Af) / c)
        double s = 0.0;
        for (int64_t h = 0; h < H; ++h) s += std::max(Af[h], 0.0);
        out = std::log(s / c);
      }
    }
    if (std::isnan(out)) return -kInf;  // zero mass
    if (out == kInf) return kLogMassCeil;
    if (out == -kInf) return out;
    return std::min(std::max(out, kLogMassFloor), kLogMassCeil);
  }

  // Output per head: softmax over buds of a_n = scale A_n / |n| (+ log|n| for "bud_mean"),
  // applied to V_n (/ |n| for "bud_mean").
  void write_output(scalar_t* out, int64_t out_stride) {
    const int64_t H = pr_.H, D = pr_.Dv;
    TREE_TIC(t_softmax);
    double* w = w_.data();
    double* m = head_max_.data();
    double* s = head_sum_.data();
    std::fill_n(m, H, -kInf);
    std::fill_n(s, H, 0.0);
    double* log_c = log_count_.data();
    if (pr_.bud_mean) {
      for (int64_t i = 0; i < nb_; ++i) log_c[i] = static_cast<double>(count_[i]);
#pragma omp simd
      for (int64_t i = 0; i < nb_; ++i) log_c[i] = std::log(log_c[i]);
    }
    for (int64_t i = 0; i < nb_; ++i) {
      const double inv_c = 1.0 / static_cast<double>(count_[i]);
      const double shift = pr_.bud_mean ? log_c[i] : 0.0;
      for (int64_t h = 0; h < H; ++h) {
        w[i * H + h] = pr_.scale * A_[i * H + h] * inv_c + shift;
        m[h] = std::max(m[h], w[i * H + h]);
      }
    }
    for (int64_t i = 0; i < nb_; ++i) {
      double* wi = w + i * H;
#pragma omp simd
      for (int64_t h = 0; h < H; ++h) {
        wi[h] = std::exp(wi[h] - m[h]);
        s[h] += wi[h];
      }
    }
    for (int64_t i = 0; i < nb_; ++i) {
      const double norm = pr_.bud_mean ? 1.0 / static_cast<double>(count_[i]) : 1.0;
      for (int64_t h = 0; h < H; ++h) weight_[h * nb_ + i] = static_cast<scalar_t>(w[i * H + h] / s[h] * norm);
    }
    // value rows: one per complete bud, the pieces of the incomplete one (PathAlignments)
    int64_t n_rows = 0;
    for (int64_t i = 0; i < nb_; ++i) {
      const int h = level_[i];
      if (readable(*vtab_, h, index_[i])) {
        value_rows_[n_rows] = vtab_->row(bi_, h, index_[i]);
        value_bud_[n_rows++] = i;
        continue;
      }
      for (int g = 0; g <= h; ++g) {
        if (!K_.has_piece(g)) continue;
        value_rows_[n_rows] = g == 0 ? vtab_->row(bi_, 0, l_ - 1) : vtab_->row(bi_, g - 1, ((l_ - 1) >> (g - 1)) - 1);
        value_bud_[n_rows++] = i;
      }
    }
    TREE_TOC(kSoftmax, t_softmax);
    TREE_TIC(t_values);
    std::fill(acc_.begin(), acc_.end(), scalar_t(0));
    for (int64_t e = 0; e < n_rows; ++e) {
      const Row<scalar_t> vs = value_rows_[e];
      const int64_t i = value_bud_[e];
      for (int64_t h = 0; h < H; ++h) {
        const scalar_t wih = weight_[h * nb_ + i];
        scalar_t* acc = acc_.data() + h * D;
        const scalar_t* vh = vs.p + h * vs.head_stride;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) acc[d] += wih * vh[d];
      }
    }
    for (int64_t h = 0; h < H; ++h) std::copy_n(acc_.data() + h * D, D, out + h * out_stride);
    TREE_TOC(kValues, t_values);
  }

  const Params& pr_;
  PathAlignments<scalar_t> K_;
  PathAlignments<double> F_;
  const NodeTables<scalar_t>* ktab_ = nullptr;
  const NodeTables<scalar_t>* vtab_ = nullptr;
  const NodeTables<double>* ftab_ = nullptr;
  int64_t bi_ = 0;
  std::vector<int> level_;
  std::vector<int64_t> index_, count_;
  std::vector<double> log_count_, logm_;
  std::vector<char> logm_ready_;
  std::vector<double> A_, Af_, keys_;
  std::vector<int64_t> cand_;
  std::vector<double> noise_, w_, head_tmp_, head_max_, head_sum_;
  std::vector<scalar_t> acc_, weight_;
  std::vector<Row<scalar_t>> value_rows_;
  std::vector<int64_t> value_bud_;
  const scalar_t* q_ = nullptr;
  const double* qf_ = nullptr;
  int64_t q_stride_ = 0, qf_stride_ = 0;
  bool use_f_ = false;
  int64_t l_ = 0, nb_ = 0;
};

template <typename scalar_t>
void run_all(const Params& pr, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
             const torch::Tensor& qf, const torch::Tensor& kf, const torch::Tensor& terms, torch::Tensor& out,
             torch::Tensor& info) {
  const LevelTables<scalar_t> ktab(k.data_ptr<scalar_t>(), pr.B, pr.H, pr.T, pr.D, pr.L, 0);
  const LevelTables<scalar_t> vtab(v.data_ptr<scalar_t>(), pr.B, pr.H, pr.T, pr.D, pr.L, 1);
  std::unique_ptr<LevelTables<double>> ftab;
  if (pr.R > 0) ftab = std::make_unique<LevelTables<double>>(kf.data_ptr<double>(), pr.B, pr.H, pr.T, pr.R, pr.L, 2);
  const NodeTables<scalar_t> kview = ktab.view(), vview = vtab.view();
  NodeTables<double> fview;
  if (ftab) fview = ftab->view();
  const int64_t capacity = terms.max().item<int64_t>() + pr.P + 1;
  const scalar_t* qp = q.data_ptr<scalar_t>();
  const double* qfp = pr.R > 0 ? qf.data_ptr<double>() : nullptr;
  const int64_t* tp = terms.data_ptr<int64_t>();
  scalar_t* op = out.data_ptr<scalar_t>();
  int64_t* ip = info.data_ptr<int64_t>();
  const int64_t n_queries = pr.B * pr.T;
  const int64_t n_workers = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n_queries));
  // worker w takes queries w, w + n_workers, ...: later positions cost more (n_terms grows with l), so a
  // strided assignment balances the threads
  at::parallel_for(0, n_workers, 1, [&](int64_t w0, int64_t w1) {
    QueryWorker<scalar_t> worker(pr, capacity);
    for (int64_t w = w0; w < w1; ++w) {
      for (int64_t n = w; n < n_queries; n += n_workers) {
        const int64_t bi = n / pr.T, t = n % pr.T;
        const int64_t first = bi * pr.H * pr.T + t;  // (bi, head 0, t) in (B, H, T, .)
        worker.run(bi, t, qp + first * pr.D, kview, vview, qfp ? qfp + first * pr.R : nullptr, ftab ? &fview : nullptr, tp,
                   op + first * pr.D, ip + 3 * n);
      }
    }
#if defined(TREE_PROFILE)
    flush_profile();
#endif
  });
#if defined(TREE_PROFILE)
  flush_profile();
#endif
}

// The view of one table (B, 2C - 1, H, X) of decode.TreeDecodeState: leaves at rows [0, C), level
// h >= 1 at rows C + internal_offset(C, h) = 2C - 2 (C >> h) (decode.TreeDecodeState.offset);
// every node holds the sum over its non-empty leaves (partial = true).
template <typename Num>
NodeTables<Num> decode_view(const Num* base, int64_t H, int64_t X, int64_t C) {
  NodeTables<Num> v;
  v.leaf = base;
  v.leaf_batch = v.inner_batch = (2 * C - 1) * H * X;
  v.leaf_pos = H * X;
  v.leaf_head = X;
  v.inner = base + C * H * X;
  v.L = C;
  v.H = H;
  v.X = X;
  v.partial = true;
  return v;
}

// The decode step: Algorithm 1 for the new query of every batch element over the persistent node
// tables of decode.TreeDecodeState (NodeTables with partial = true), batch elements spread over
// ATen's intra-op threads (the heads of one batch element share its tree and its sampling, so they
// are one query). q (B, H, D), qf (B, H, R); out (B, H, Dv), info (B, 3).
template <typename scalar_t>
void decode_all(const Params& pr, int64_t l, int64_t pos, int64_t n_terms, const torch::Tensor& q,
                const torch::Tensor& K, const torch::Tensor& V, const torch::Tensor& qf, const torch::Tensor& F,
                torch::Tensor& out, torch::Tensor& info) {
  const NodeTables<scalar_t> kview = decode_view<scalar_t>(K.data_ptr<scalar_t>(), pr.H, pr.D, pr.L);
  const NodeTables<scalar_t> vview = decode_view<scalar_t>(V.data_ptr<scalar_t>(), pr.H, pr.Dv, pr.L);
  NodeTables<double> fview;
  if (pr.R > 0) fview = decode_view<double>(F.data_ptr<double>(), pr.H, pr.R, pr.L);
  const scalar_t* qp = q.data_ptr<scalar_t>();
  const double* qfp = pr.R > 0 ? qf.data_ptr<double>() : nullptr;
  scalar_t* op = out.data_ptr<scalar_t>();
  int64_t* ip = info.data_ptr<int64_t>();
  at::parallel_for(0, pr.B, 1, [&](int64_t b0, int64_t b1) {
    QueryWorker<scalar_t> worker(pr, n_terms + pr.P + 1);
    for (int64_t bi = b0; bi < b1; ++bi)
      worker.query(bi, pos, l, n_terms, qp + bi * pr.H * pr.D, pr.D, qfp ? qfp + bi * pr.H * pr.R : nullptr, pr.R,
                   kview, vview, pr.R > 0 ? &fview : nullptr, op + bi * pr.H * pr.Dv, pr.Dv, ip + 3 * bi);
#if defined(TREE_PROFILE)
    flush_profile();
#endif
  });
#if defined(TREE_PROFILE)
  flush_profile();
#endif
}

// The sampling parameters both entry points share (checked here; TreeAttention.__init__ checks them
// with friendlier messages first).
void set_sampling(Params& pr, int64_t P, int64_t sampler, bool bud_mean, bool authors_descent, double b,
                  int64_t seed) {
  TORCH_CHECK(P >= 1, "P must be >= 1; got ", P);
  TORCH_CHECK(sampler >= kUniform && sampler <= kFavorPlusRelu, "sampler id out of range: ", sampler);
  TORCH_CHECK(b > 0.0 && b < 1.0, "b must be in (0, 1); got ", b);
  pr.P = P;
  pr.bud_mean = bud_mean;
  pr.authors_descent = authors_descent;
  pr.sampler = static_cast<int>(sampler);
  pr.log_b = std::log(b);
  pr.log1m_b = std::log1p(-b);
  pr.seed_hash = mix(static_cast<uint64_t>(seed));
}

}  // namespace

// Python entry point (cpu.py). Checks shapes and dtypes; parameter values are checked by
// TreeAttention.__init__.
std::vector<torch::Tensor> tree_attention_cpu(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor qf,
                                              torch::Tensor kf, torch::Tensor terms, bool causal, bool exclude_self,
                                              int64_t P, int64_t sampler, bool bud_mean, bool authors_descent,
                                              double b, int64_t seed) {
  TORCH_CHECK(q.dim() == 4 && q.device().is_cpu(), "q must be a CPU tensor (B, H, T, D); got ", q.sizes());
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble,
              "q must be float32 or float64; got ", q.scalar_type());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), "q, k, v must share a dtype");
  TORCH_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "q, k, v shapes differ: ", q.sizes(), " ",
              k.sizes(), " ", v.sizes());
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "q, k, v must be contiguous");
  Params pr;
  pr.B = q.size(0);
  pr.H = q.size(1);
  pr.T = q.size(2);
  pr.D = q.size(3);
  pr.Dv = pr.D;
  pr.L = 1;
  while (pr.L < pr.T) pr.L *= 2;  // schedule.block_length
  pr.levels = 0;
  while ((int64_t(1) << pr.levels) <= pr.L) ++pr.levels;  // log2(L) + 1
  TORCH_CHECK(terms.scalar_type() == at::kLong && terms.numel() == pr.T + 1 && terms.is_contiguous(),
              "terms must be int64 (T + 1,)");
  set_sampling(pr, P, sampler, bud_mean, authors_descent, b, seed);
  pr.causal = causal;
  pr.exclude_self = exclude_self;
  pr.scale = 1.0 / std::sqrt(static_cast<double>(pr.D));
  pr.R = 0;
  if (sampler >= kPositiveAlignment) {
    TORCH_CHECK(qf.dim() == 4 && qf.scalar_type() == at::kDouble && kf.scalar_type() == at::kDouble &&
                    qf.is_contiguous() && kf.is_contiguous() && qf.sizes() == kf.sizes(),
                "feature samplers need float64 contiguous qf and kf of equal shape (B, H, T, R)");
    pr.R = qf.size(3);
    TORCH_CHECK(qf.size(0) == pr.B && qf.size(1) == pr.H && qf.size(2) == pr.T,
                "qf ", qf.sizes(), " does not match q ", q.sizes());
  }
  auto out = torch::empty_like(q);
  auto info = torch::empty({pr.B, pr.T, 3}, q.options().dtype(at::kLong));
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "tree_attention_cpu",
                             [&] { run_all<scalar_t>(pr, q, k, v, qf, kf, terms, out, info); });
  return {out, info};
}

// Python entry point of the decode step (decode.py, ``decode_query`` with implementation "cpu"):
// Algorithm 1 for the query at position pos of every batch element over the first l leaves of the
// node tables of decode.TreeDecodeState, with the draws of the forward's row pos.
//   q   (B, H, D)          scalar_t   the new queries (scalar_t: float or double, K's dtype)
//   K   (B, 2C - 1, H, D)  scalar_t   key sums, level h at rows [2C - 2 (C >> h), 2C - (C >> h)), C a power
//   V   (B, 2C - 1, H, Dv) scalar_t   of two; value sums; leaves l .. C - 1 empty (zero), so every node
//   qf  (B, H, R)          double     holds the sum over its leaves in [0, l) (feature samplers,
//   F   (B, 2C - 1, H, R)  double     else empty tensors): feature-mapped query, feature-key sums
// l: history length, 1 <= l <= C; pos >= 0: the query's position (draws); n_terms in [1, l];
// scale: score scale (1/sqrt(D) in TreeAttention). Returns {out (B, H, Dv) scalar_t, info (B, 3) int64:
// initial buds, splits, final buds}.
std::vector<torch::Tensor> tree_decode_step(torch::Tensor q, torch::Tensor K, torch::Tensor V, torch::Tensor qf,
                                            torch::Tensor F, int64_t l, int64_t pos, int64_t n_terms, int64_t P,
                                            int64_t sampler, bool bud_mean, bool authors_descent, double scale,
                                            double b, int64_t seed) {
  TORCH_CHECK(q.dim() == 3 && q.device().is_cpu(), "decode_step: q must be a CPU tensor (B, H, D); got ", q.sizes());
  TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble,
              "decode_step: q must be float32 or float64; got ", q.scalar_type());
  TORCH_CHECK(K.scalar_type() == q.scalar_type() && V.scalar_type() == q.scalar_type(),
              "decode_step: q, K, V must share a dtype");
  TORCH_CHECK(K.dim() == 4 && V.dim() == 4 && K.device().is_cpu() && V.device().is_cpu(),
              "decode_step: K, V must be CPU tensors (B, 2C - 1, H, X)");
  TORCH_CHECK(q.is_contiguous() && K.is_contiguous() && V.is_contiguous(), "decode_step: q, K, V must be contiguous");
  Params pr;
  pr.B = q.size(0);
  pr.H = q.size(1);
  pr.D = q.size(2);
  pr.Dv = V.size(3);
  const int64_t rows = K.size(1), C = (rows + 1) / 2;
  TORCH_CHECK(rows >= 1 && (C & (C - 1)) == 0 && rows == 2 * C - 1, "decode_step: K has ", rows,
              " node rows; expected 2C - 1 with C a power of two");
  TORCH_CHECK(K.size(0) == pr.B && K.size(2) == pr.H && K.size(3) == pr.D, "decode_step: K ", K.sizes(),
              " does not match q ", q.sizes());
  TORCH_CHECK(V.size(0) == pr.B && V.size(1) == rows && V.size(2) == pr.H, "decode_step: V ", V.sizes(),
              " does not match K ", K.sizes());
  TORCH_CHECK(l >= 1 && l <= C, "decode_step: history length l=", l, " outside [1, C=", C, "]");
  TORCH_CHECK(n_terms >= 1 && n_terms <= l, "decode_step: n_terms=", n_terms, " outside [1, l=", l, "]");
  TORCH_CHECK(pos >= 0, "decode_step: pos must be >= 0; got ", pos);
  pr.T = pr.L = C;
  pr.levels = 0;
  while ((int64_t(1) << pr.levels) <= C) ++pr.levels;  // log2(C) + 1
  set_sampling(pr, P, sampler, bud_mean, authors_descent, b, seed);
  pr.causal = true;
  pr.exclude_self = false;
  pr.scale = scale;
  pr.R = 0;
  if (sampler >= kPositiveAlignment) {
    TORCH_CHECK(qf.dim() == 3 && F.dim() == 4 && qf.scalar_type() == at::kDouble && F.scalar_type() == at::kDouble &&
                    qf.is_contiguous() && F.is_contiguous(),
                "decode_step: feature samplers need float64 contiguous qf (B, H, R) and F (B, 2C - 1, H, R)");
    pr.R = qf.size(2);
    TORCH_CHECK(qf.size(0) == pr.B && qf.size(1) == pr.H && F.size(0) == pr.B && F.size(1) == rows &&
                    F.size(2) == pr.H && F.size(3) == pr.R,
                "decode_step: qf ", qf.sizes(), " / F ", F.sizes(), " do not match q ", q.sizes(), " / K ", K.sizes());
  }
  auto out = torch::empty({pr.B, pr.H, pr.Dv}, q.options());
  auto info = torch::empty({pr.B, 3}, q.options().dtype(at::kLong));
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "tree_decode_step",
                             [&] { decode_all<scalar_t>(pr, l, pos, n_terms, q, K, V, qf, F, out, info); });
  return {out, info};
}

#if defined(TREE_PROFILE)
// Profile build only: {phase: seconds} and {operation: count} summed over the calls since the last
// read (then reset). Seconds = time stamp counter ticks / ticks per ns measured here (x86-64).
std::vector<std::map<std::string, double>> read_profile() {
  const uint64_t c0 = prof_clock();
  const auto w0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - w0 < std::chrono::milliseconds(20)) {
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - w0).count();
  const double ticks_per_s = static_cast<double>(prof_clock() - c0) / ns * 1e9;
  std::lock_guard<std::mutex> lock(g_profile_mutex);
  std::map<std::string, double> seconds, counts;
  for (int i = 0; i < kPhases; ++i) seconds[kPhaseNames[i]] = static_cast<double>(g_profile.ticks[i]) / ticks_per_s;
  for (int i = 0; i < kCounts; ++i) counts[kCountNames[i]] = static_cast<double>(g_profile.counts[i]);
  g_profile = Profile();
  return {seconds, counts};
}
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &tree_attention_cpu, "Tree attention forward on CPU (see cpu_kernel.cpp header)");
  m.def("decode_step", &tree_decode_step,
        "Tree attention decode step on CPU over decode.TreeDecodeState's node tables (see tree_decode_step)");
#if defined(TREE_PROFILE)
  m.def("profile", &read_profile, "profile build: ({phase: seconds}, {operation: count}) since the last read");
#endif
}
