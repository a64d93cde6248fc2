// CPU kernel of tree / bud-expansion attention (Algorithm 1 of "High Attention Scores and Where to
// Find Them"), one query per iteration, queries spread over ATen's intra-op threads.
//
// Specification: reference.py (conventions) and samplers.py (masses, random draws); this file must
// give the same buds for the same seed. Python side: cpu.py (compiles and loads this, passes the
// n_terms table of schedule.py). The seed passed in already contains the layer index
// (samplers.layer_seed), so the layers of a model draw independently.
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
// Level tables (built here, Eq. 1): (B, 2L-1, H, X), rows [2L - 2L/2^h, 2L - L/2^h) hold the sums
// of the level-h nodes over the WHOLE sequence, one node's heads together. A node that contains the
// history end (leaf l-1) but extends past it is "incomplete": its sums over the history [start, l)
// are composed from complete nodes along the path of leaf l-1.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

// glibc's vector math (libmvec): lets the compiler vectorise exp / log in `omp simd` loops
#if defined(TREE_USE_LIBMVEC)
extern "C" {
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
double log(double);
}
#endif

namespace {

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

template <typename Num>
inline void add_into(Num* dst, const Num* a, const Num* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
}

struct Params {
  int64_t B, T, H, D, R, L, levels, P;
  bool causal, exclude_self, bud_mean, authors_descent;
  int sampler;
  double scale, log_b, log1m_b;  // 1/sqrt(D), log b, log(1 - b) (EDH)
  uint64_t seed_hash;
};

inline int64_t level_offset(int64_t L, int64_t h) { return 2 * L - (2 * L >> h); }

// Level table (B, 2L-1, H, X) of x (B, H, T, X): leaves t >= T are zero, a parent is the sum of its
// two children (Eq. 1).
template <typename Num>
torch::Tensor build_levels(const torch::Tensor& x, int64_t L) {
  const int64_t B = x.size(0), H = x.size(1), Tn = x.size(2), X = x.size(3), HX = H * X, nodes = 2 * L - 1;
  auto tab = torch::empty({B, nodes, H, X}, x.options());
  const Num* xp = x.data_ptr<Num>();
  Num* tp = tab.data_ptr<Num>();
  at::parallel_for(0, B * L, 64, [&](int64_t a, int64_t e) {
    for (int64_t n = a; n < e; ++n) {
      const int64_t b = n / L, t = n % L;
      Num* dst = tp + (b * nodes + t) * HX;
      if (t >= Tn) {
        std::fill(dst, dst + HX, Num(0));
        continue;
      }
      for (int64_t h = 0; h < H; ++h) std::copy_n(xp + ((b * H + h) * Tn + t) * X, X, dst + h * X);
    }
  });
  for (int64_t h = 1; (L >> h) >= 1; ++h) {
    const int64_t n = L >> h, off = level_offset(L, h), off_child = level_offset(L, h - 1);
    at::parallel_for(0, B * n, 64, [&](int64_t a, int64_t e) {
      for (int64_t m = a; m < e; ++m) {
        const int64_t b = m / n, j = m % n;
        const Num* child = tp + (b * nodes + off_child + 2 * j) * HX;
        add_into(tp + (b * nodes + off + j) * HX, child, child + HX, HX);
      }
    });
  }
  return tab;
}

// Sums over the history [start, l) of the nodes that contain leaf p = l - 1 (the path of p),
// composed lazily from complete nodes: partial(h) = partial(h-1) (+ left sibling if p's node at
// level h-1 is a right child). Pointers point into the level table where the node is complete.
template <typename Num>
class PathSums {
 public:
  PathSums(const Params& pr, int64_t width) : pr_(pr), width_(width), buf_(pr.levels * width), ptr_(pr.levels) {}

  void reset(const Num* table, int64_t l) {
    table_ = table;
    p_ = l - 1;
    done_ = 0;
    ptr_[0] = row(0, p_);  // a leaf in the history is always complete
  }

  const Num* at(int64_t h) {
    for (; done_ < h; ++done_) {
      const int64_t lev = done_ + 1;
      const int64_t child = p_ >> done_;
      if (child & 1) {  // p's node at level done_ is a right child: add its (complete) left sibling
        Num* dst = buf_.data() + lev * width_;
        add_into(dst, ptr_[done_], row(done_, child - 1), width_);
        ptr_[lev] = dst;
      } else {
        ptr_[lev] = ptr_[done_];
      }
    }
    return ptr_[h];
  }

  const Num* row(int64_t h, int64_t j) const { return table_ + (level_offset(pr_.L, h) + j) * width_; }

 private:
  const Params& pr_;
  int64_t width_;
  std::vector<Num> buf_;
  std::vector<const Num*> ptr_;
  const Num* table_ = nullptr;
  int64_t p_ = 0, done_ = 0;
};

// Algorithm 1 for one query at a time (reference.tree_attention_query), with reusable buffers.
template <typename scalar_t>
class QueryWorker {
 public:
  QueryWorker(const Params& pr, int64_t capacity)
      : pr_(pr), K_(pr, pr.H * pr.D), V_(pr, pr.H * pr.D), F_(pr, pr.H * std::max<int64_t>(pr.R, 1)),
        level_(capacity), index_(capacity), count_(capacity), log_count_(capacity), logm_(capacity),
        logm_ready_(capacity), A_(capacity * pr.H), Af_(capacity * pr.H), keys_(capacity), cand_(capacity),
        noise_(capacity), w_(capacity * pr.H), head_tmp_(pr.H), head_max_(pr.H), head_sum_(pr.H),
        acc_(pr.H * pr.D), weight_(capacity * pr.H), value_ptr_(capacity) {}

  // Query position t of batch element bi; q, qf point at (bi, head 0, t) of (B, H, T, X) tensors,
  // out at the same place of the output. Writes info_row = (initial buds, splits, final buds).
  void run(int64_t bi, int64_t t, const scalar_t* q, const scalar_t* ktab, const scalar_t* vtab,
           const double* qf, const double* ftab, const int64_t* terms, scalar_t* out, int64_t* info_row) {
    const int64_t H = pr_.H, D = pr_.D, head_stride = pr_.T * D;
    l_ = pr_.causal ? (pr_.exclude_self ? t : t + 1) : pr_.T;
    if (l_ == 0) {
      for (int64_t h = 0; h < H; ++h) std::fill_n(out + h * head_stride, D, scalar_t(0));
      info_row[0] = info_row[1] = info_row[2] = 0;
      return;
    }
    q_ = q;
    qf_ = qf;
    use_f_ = pr_.sampler >= kPositiveAlignment;
    K_.reset(ktab, l_);
    V_.reset(vtab, l_);
    if (use_f_) F_.reset(ftab, l_);
    const int64_t n_terms = terms[l_];
    // initial buds (reference.initial_width): w = max(1, 2^ceil(log2 l) / 2^floor(log2 P))
    const int64_t w = std::max<int64_t>(1, (int64_t(1) << ceil_log2(l_)) >> floor_log2(pr_.P));
    const int h0 = floor_log2(w);
    const int64_t n0 = (l_ + w - 1) / w;
    nb_ = 0;
    for (int64_t j = 0; j < n0; ++j) add_bud(h0, j);
    const uint64_t h_query = mix(mix(pr_.seed_hash ^ static_cast<uint64_t>(bi)) ^ static_cast<uint64_t>(t));
    int64_t splits = 0;
    for (int64_t rnd = 0; nb_ < n_terms; ++rnd) {
      // Gumbel-top-k keys of the expandable buds (samplers.sampling_keys)
      int64_t n_exp = 0;
      for (int64_t i = 0; i < nb_; ++i) {
        if (count_[i] < 2) continue;
        if (!logm_ready_[i]) {
          logm_[i] = log_mass(i);
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
      const int64_t k = std::min<int64_t>(pr_.P, n_exp);
      std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.begin() + n_exp,
                        [&](int64_t a, int64_t b) { return keys_[a] > keys_[b]; });
      const int64_t nb_before = nb_;
      for (int64_t c = 0; c < k; ++c) expand(cand_[c]);
      splits += nb_ - nb_before;
    }
    write_output(out);
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
  const scalar_t* key_sum(int h, int64_t j) { return complete(h, j) ? K_.row(h, j) : K_.at(h); }
  const scalar_t* value_sum(int h, int64_t j) { return complete(h, j) ? V_.row(h, j) : V_.at(h); }
  const double* feature_sum(int h, int64_t j) { return complete(h, j) ? F_.row(h, j) : F_.at(h); }

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
    const scalar_t* ks = key_sum(h, j);
    for (int64_t hh = 0; hh < H; ++hh) A_[i * H + hh] = static_cast<double>(dot(q_ + hh * pr_.T * D, ks + hh * D, D));
    if (use_f_) {
      const double* fs = feature_sum(h, j);
      for (int64_t hh = 0; hh < H; ++hh) Af_[i * H + hh] = dot(qf_ + hh * pr_.T * R, fs + hh * R, R);
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
  void write_output(scalar_t* out) {
    const int64_t H = pr_.H, D = pr_.D;
    double* w = w_.data();
    double* m = head_max_.data();
    double* s = head_sum_.data();
    std::fill_n(m, H, -kInf);
    std::fill_n(s, H, 0.0);
    double* log_c = log_count_.data();
    for (int64_t i = 0; i < nb_; ++i) log_c[i] = static_cast<double>(count_[i]);
#pragma omp simd
    for (int64_t i = 0; i < nb_; ++i) log_c[i] = std::log(log_c[i]);
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
      value_ptr_[i] = value_sum(level_[i], index_[i]);
    }
    std::fill(acc_.begin(), acc_.end(), scalar_t(0));
    for (int64_t i = 0; i < nb_; ++i) {
      const scalar_t* vs = value_ptr_[i];
      for (int64_t h = 0; h < H; ++h) {
        const scalar_t wih = weight_[h * nb_ + i];
        scalar_t* acc = acc_.data() + h * D;
        const scalar_t* vh = vs + h * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) acc[d] += wih * vh[d];
      }
    }
    for (int64_t h = 0; h < H; ++h) std::copy_n(acc_.data() + h * D, D, out + h * pr_.T * D);
  }

  const Params& pr_;
  PathSums<scalar_t> K_, V_;
  PathSums<double> F_;
  std::vector<int> level_;
  std::vector<int64_t> index_, count_;
  std::vector<double> log_count_, logm_;
  std::vector<char> logm_ready_;
  std::vector<double> A_, Af_, keys_;
  std::vector<int64_t> cand_;
  std::vector<double> noise_, w_, head_tmp_, head_max_, head_sum_;
  std::vector<scalar_t> acc_, weight_;
  std::vector<const scalar_t*> value_ptr_;
  const scalar_t* q_ = nullptr;
  const double* qf_ = nullptr;
  bool use_f_ = false;
  int64_t l_ = 0, nb_ = 0;
};

template <typename scalar_t>
void run_all(const Params& pr, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
             const torch::Tensor& qf, const torch::Tensor& kf, const torch::Tensor& terms, torch::Tensor& out,
             torch::Tensor& info) {
  const int64_t nodes = 2 * pr.L - 1, HD = pr.H * pr.D, HR = pr.H * pr.R;
  const torch::Tensor ktab = build_levels<scalar_t>(k, pr.L), vtab = build_levels<scalar_t>(v, pr.L);
  const torch::Tensor ftab = pr.R > 0 ? build_levels<double>(kf, pr.L) : torch::Tensor();
  const int64_t capacity = terms.max().item<int64_t>() + pr.P + 1;
  const scalar_t* qp = q.data_ptr<scalar_t>();
  const scalar_t* kp = ktab.data_ptr<scalar_t>();
  const scalar_t* vp = vtab.data_ptr<scalar_t>();
  const double* qfp = pr.R > 0 ? qf.data_ptr<double>() : nullptr;
  const double* fp = pr.R > 0 ? ftab.data_ptr<double>() : nullptr;
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
        worker.run(bi, t, qp + first * pr.D, kp + bi * nodes * HD, vp + bi * nodes * HD,
                   qfp ? qfp + first * pr.R : nullptr, fp ? fp + bi * nodes * HR : nullptr, tp, op + first * pr.D,
                   ip + 3 * n);
      }
    }
  });
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
  pr.L = 1;
  while (pr.L < pr.T) pr.L *= 2;  // schedule.block_length
  pr.levels = 0;
  while ((int64_t(1) << pr.levels) <= pr.L) ++pr.levels;  // log2(L) + 1
  TORCH_CHECK(terms.scalar_type() == at::kLong && terms.numel() == pr.T + 1 && terms.is_contiguous(),
              "terms must be int64 (T + 1,)");
  TORCH_CHECK(P >= 1, "P must be >= 1; got ", P);
  TORCH_CHECK(sampler >= kUniform && sampler <= kFavorPlusRelu, "sampler id out of range: ", sampler);
  TORCH_CHECK(b > 0.0 && b < 1.0, "b must be in (0, 1); got ", b);
  pr.P = P;
  pr.causal = causal;
  pr.exclude_self = exclude_self;
  pr.bud_mean = bud_mean;
  pr.authors_descent = authors_descent;
  pr.sampler = static_cast<int>(sampler);
  pr.scale = 1.0 / std::sqrt(static_cast<double>(pr.D));
  pr.log_b = std::log(b);
  pr.log1m_b = std::log1p(-b);
  pr.seed_hash = mix(static_cast<uint64_t>(seed));
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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &tree_attention_cpu, "Tree attention forward on CPU (see cpu_kernel.cpp header)");
}
