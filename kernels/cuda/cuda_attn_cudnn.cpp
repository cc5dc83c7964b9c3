// defines: the cuDNN attention core's graphs (cuda_attn_cudnn.h) — cuDNN's fused SDPA forward and
// backward built with the cuDNN frontend's graph API, cached per descriptor.
//
// The only file that includes the frontend (header-only C++17; its headers cost over a minute of
// compile on two cores).  cuDNN is loaded with dlopen (the frontend's dynamic-loading mode), so
// the build needs no libcudnn and a machine without it loses only this core: the registry
// (cuda_attn_dispatch.cu) then falls back with the reason this file gives.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1
#define CUDNN_FRONTEND_SKIP_JSON_LIB 1

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cudnn_frontend.h>

#include "kernels/cuda/cuda_attn_cudnn.h"

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;  // the frontend's dynamic loading reads its symbols from here
}

namespace fe = cudnn_frontend;
namespace {

// The oldest cuDNN whose SDPA serves what the registry promises (padding mask with dbias, GQA
// backward, d_qk != d_v): 9.5.
constexpr long kMinCudnn = 90500;

// Tensor uids: a call binds its pointers by these.
enum Uid : int64_t { U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_BIAS, U_DBIAS,
                     U_SEQ_Q, U_SEQ_KV, U_SEED, U_OFFSET };

struct Loaded {
    std::once_flag once;
    bool ok = false;
    std::string why;
    long version = 0;
};
Loaded g_lib;

void put(char *why, size_t n, const std::string &s) {
    if (why && n) std::snprintf(why, n, "%s", s.c_str());
}

void load_once() {
    std::vector<std::string> names = {"libcudnn.so.9"};
    if (const char *p = std::getenv("MHE_CUDNN_LIB"); p && *p) names.insert(names.begin(), p);
    std::string errs;
    for (const auto &n : names) {
        // RTLD_GLOBAL: libcudnn opens its engine libraries (libcudnn_engines_*.so.9) itself.
        if (void *h = dlopen(n.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
            fe::cudnn_dlhandle = h;
            break;
        }
        const char *e = dlerror();
        errs += (errs.empty() ? "" : "; ") + std::string(e ? e : n.c_str());
    }
    if (!fe::cudnn_dlhandle) {
        g_lib.why = "cuDNN not found (" + errs + ")";
        return;
    }
    try {
        g_lib.version = (long)fe::detail::get_backend_version();
    } catch (const std::exception &e) {
        g_lib.why = std::string("cuDNN unusable: ") + e.what();
        return;
    }
    if (g_lib.version < kMinCudnn) {
        g_lib.why = "cuDNN " + std::to_string(g_lib.version) + " is older than " + std::to_string(kMinCudnn) +
                    " (the SDPA features this core uses)";
        return;
    }
    g_lib.ok = true;
}

std::vector<int64_t> v4(const int64_t *a) { return {a[0], a[1], a[2], a[3]}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph &g, const char *name, Uid uid,
                                                     std::vector<int64_t> dim, std::vector<int64_t> stride) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
}

std::shared_ptr<fe::graph::Tensor_attributes> scalar(fe::graph::Graph &g, const char *name, Uid uid,
                                                     fe::DataType_t type, bool by_value) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({1, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_is_pass_by_value(by_value)
                        .set_data_type(type));
}

// The graph of one descriptor, built up to (not including) validation.  sm > 0: for that compute
// capability without a device (set first: each node takes the graph's context as it is added).
std::shared_ptr<fe::graph::Graph> make_graph(const CudnnSdpa &d, int sm = 0) {
    auto g = std::make_shared<fe::graph::Graph>();
    if (sm > 0) g->set_sm_version(sm);
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto Q = input(*g, "Q", U_Q, {d.B, d.hq, d.T, d.dqk}, v4(d.q_stride));
    auto K = input(*g, "K", U_K, {d.B, d.hk, d.T, d.dqk}, v4(d.k_stride));
    auto V = input(*g, "V", U_V, {d.B, d.hv, d.T, d.dv}, v4(d.v_stride));
    std::shared_ptr<fe::graph::Tensor_attributes> bias, seq_q, seq_kv, seed, offset;
    if (d.bias) bias = input(*g, "bias", U_BIAS, {d.B, d.hq, 1, d.T}, v4(d.bias_stride));
    if (d.padding) {
        auto seq = [&](const char *name, Uid uid) {
            return g->tensor(fe::graph::Tensor_attributes()
                                 .set_name(name)
                                 .set_uid(uid)
                                 .set_dim({d.B, 1, 1, 1})
                                 .set_stride({1, 1, 1, 1})
                                 .set_data_type(fe::DataType_t::INT32));
        };
        seq_q = seq("seq_q", U_SEQ_Q);
        seq_kv = seq("seq_kv", U_SEQ_KV);
    }
    if (d.dropout > 0.0f) {
        seed = scalar(*g, "seed", U_SEED, fe::DataType_t::INT64, true);
        offset = scalar(*g, "offset", U_OFFSET, fe::DataType_t::INT64, true);
    }
    const std::vector<int64_t> stats_dim = {d.B, d.hq, d.T, 1}, stats_stride = {d.hq * d.T, d.T, 1, 1};
    const std::vector<int64_t> o_dim = {d.B, d.hq, d.T, d.dv};
    if (!d.backward) {
        auto o = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(d.scale);
        if (d.causal) o.set_causal_mask(true);
        if (bias) o.set_bias(bias);
        if (d.padding) o.set_padding_mask(true).set_seq_len_q(seq_q).set_seq_len_kv(seq_kv);
        if (seed) o.set_dropout(d.dropout, seed, offset);
        auto [O, stats] = g->sdpa(Q, K, V, o);
        O->set_output(true).set_uid(U_O).set_dim(o_dim).set_stride(v4(d.o_stride));
        stats->set_output(true).set_uid(U_STATS).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dim).set_stride(
            stats_stride);
        return g;
    }
    auto O = input(*g, "O", U_O, o_dim, v4(d.o_stride));
    auto dO = input(*g, "dO", U_DO, o_dim, v4(d.o_stride));
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("stats")
                               .set_uid(U_STATS)
                               .set_dim(stats_dim)
                               .set_stride(stats_stride)
                               .set_data_type(fe::DataType_t::FLOAT));
    // Deterministic: the replicas of a data-parallel run must compute the same gradients bit for
    // bit (their identity check), and so must a resumed run.
    auto o = fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(d.scale)
                 .set_deterministic_algorithm(true);
    if (d.causal) o.set_causal_mask(true);
    std::shared_ptr<fe::graph::Tensor_attributes> dbias;
    if (bias) {
        dbias = input(*g, "dbias", U_DBIAS, {d.B, d.hq, 1, d.T}, v4(d.bias_stride));
        o.set_bias(bias).set_dbias(dbias);
    }
    if (d.padding) o.set_padding_mask(true).set_seq_len_q(seq_q).set_seq_len_kv(seq_kv);
    if (seed) o.set_dropout(d.dropout, seed, offset);
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, o);
    dQ->set_output(true).set_uid(U_DQ).set_dim({d.B, d.hq, d.T, d.dqk}).set_stride(v4(d.q_stride));
    dK->set_output(true).set_uid(U_DK).set_dim({d.B, d.hk, d.T, d.dqk}).set_stride(v4(d.k_stride));
    dV->set_output(true).set_uid(U_DV).set_dim({d.B, d.hv, d.T, d.dv}).set_stride(v4(d.v_stride));
    return g;
}

// Descriptors compare as bytes: make them with every byte set (memset, then the fields).
struct Key {
    CudnnSdpa d;
    int device;
    bool operator<(const Key &o) const { return std::memcmp(this, &o, sizeof(Key)) < 0; }
};
struct Built {
    std::shared_ptr<fe::graph::Graph> g;
    int64_t workspace = 0;
    std::string why;  // non-empty: this descriptor cannot run (kept, so it is not rebuilt)
};

std::mutex g_mu;
std::map<Key, Built> g_cache;
std::map<int, cudnnHandle_t> g_handles;

cudnnHandle_t handle_for(int device) {
    auto it = g_handles.find(device);
    if (it != g_handles.end()) return it->second;
    cudnnHandle_t h = nullptr;
    if (fe::detail::create_handle(&h) != CUDNN_STATUS_SUCCESS) return nullptr;
    g_handles[device] = h;
    return h;
}

std::string fe_error(const char *step, fe::error_t e) { return std::string(step) + ": " + e.get_message(); }

Built build(const CudnnSdpa &d, int device) {
    Built b;
    cudnnHandle_t h = handle_for(device);
    if (!h) {
        b.why = "cudnnCreate failed";
        return b;
    }
    auto g = make_graph(d);
    fe::error_t e = g->validate();
    if (e.is_bad()) { b.why = fe_error("validate", e); return b; }
    if ((e = g->build_operation_graph(h)).is_bad()) { b.why = fe_error("operation graph", e); return b; }
    if ((e = g->create_execution_plans({fe::HeurMode_t::A})).is_bad()) { b.why = fe_error("execution plans", e); return b; }
    if ((e = g->check_support(h)).is_bad()) { b.why = fe_error("support check", e); return b; }
    if ((e = g->build_plans(h)).is_bad()) { b.why = fe_error("build plans", e); return b; }
    if ((e = g->get_workspace_size(b.workspace)).is_bad()) { b.why = fe_error("workspace", e); return b; }
    b.g = g;
    return b;
}

const Built &built(const CudnnSdpa &d, int device) {
    Key k;
    std::memset(&k, 0, sizeof k);
    k.d = d;
    k.device = device;
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_cache.find(k);
    if (it == g_cache.end()) it = g_cache.emplace(k, build(d, device)).first;
    return it->second;
}

}  // namespace

extern "C" int mhe_cudnn_load(char *why, size_t why_len) {
    std::call_once(g_lib.once, load_once);
    if (!g_lib.ok) put(why, why_len, g_lib.why);
    return g_lib.ok;
}

extern "C" long mhe_cudnn_version(void) { return g_lib.ok ? g_lib.version : 0; }
extern "C" long mhe_cudnn_frontend_version(void) { return CUDNN_FRONTEND_VERSION; }

namespace {

// Every entry point: cuDNN loaded first (the frontend resolves its symbols once, at first use),
// and no exception past the C face.
template <typename F> int guarded(char *why, size_t why_len, F f) {
    if (!mhe_cudnn_load(why, why_len)) return 0;
    try {
        return f();
    } catch (const std::exception &ex) {
        put(why, why_len, std::string("frontend: ") + ex.what());
        return 0;
    }
}

// d's built graph on `device`, or null with the reason it cannot run.
const Built *ready(const CudnnSdpa *d, int device, char *why, size_t why_len) {
    const Built &b = built(*d, device);
    if (b.g) return &b;
    put(why, why_len, b.why);
    return nullptr;
}

}  // namespace

extern "C" int mhe_cudnn_validate(const CudnnSdpa *d, int sm, char *why, size_t why_len) {
    return guarded(why, why_len, [&] {
        fe::error_t e = make_graph(*d, sm)->validate();
        if (e.is_bad()) put(why, why_len, fe_error("validate", e));
        return (int)e.is_good();
    });
}

extern "C" int mhe_cudnn_prepare(const CudnnSdpa *d, int device, size_t *workspace_bytes, char *why,
                                 size_t why_len) {
    return guarded(why, why_len, [&] {
        const Built *b = ready(d, device, why, why_len);
        if (b && workspace_bytes) *workspace_bytes = (size_t)b->workspace;
        return b != nullptr;
    });
}

extern "C" int mhe_cudnn_run(const CudnnSdpa *d, int device, void *stream, const CudnnSdpaArgs *a, char *why,
                             size_t why_len) {
    return guarded(why, why_len, [&] {
        const Built *b = ready(d, device, why, why_len);
        if (!b) return 0;
        cudnnHandle_t h = handle_for(device);
        if (fe::detail::set_stream(h, static_cast<cudaStream_t>(stream)) != CUDNN_STATUS_SUCCESS) {
            put(why, why_len, "cudnnSetStream failed");
            return 0;
        }
        int64_t seed = a->seed, offset = a->offset;
        std::unordered_map<int64_t, void *> pack = {{U_Q, const_cast<void *>(a->q)},
                                                    {U_K, const_cast<void *>(a->k)},
                                                    {U_V, const_cast<void *>(a->v)},
                                                    {U_STATS, a->stats}};
        if (!d->backward) {
            pack[U_O] = a->out;
        } else {
            pack[U_O] = const_cast<void *>(a->o);
            pack[U_DO] = const_cast<void *>(a->dout);
            pack[U_DQ] = a->dq;
            pack[U_DK] = a->dk;
            pack[U_DV] = a->dv;
            if (d->bias) pack[U_DBIAS] = a->dbias;
        }
        if (d->bias) pack[U_BIAS] = const_cast<void *>(a->bias);
        if (d->padding) {
            pack[U_SEQ_Q] = const_cast<int32_t *>(a->seq_q);
            pack[U_SEQ_KV] = const_cast<int32_t *>(a->seq_kv);
        }
        if (d->dropout > 0.0f) {
            pack[U_SEED] = &seed;
            pack[U_OFFSET] = &offset;
        }
        fe::error_t e = b->g->execute(h, pack, a->workspace);
        if (e.is_bad()) {
            put(why, why_len, fe_error("execute", e));
            return 0;
        }
        return 1;
    });
}
