// Python binding of the kbmla C++ API (nanobind over DLPack): tensors from torch, CuPy,
// JAX or anything else that speaks DLPack are used in place, without copies. Every
// argument is checked here, before the C++ API checks it again, with the same kind of
// message (the value and what is allowed); kbmla::Error surfaces as ValueError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kbmla/dcp.hpp"
#include "kbmla/decode.hpp"
#include "kbmla/error.hpp"
#include "kbmla/planner.hpp"

namespace nb = nanobind;

namespace kbmla::python {
namespace {

using Tensor = nb::ndarray<>;

std::string shape_string(const Tensor& t) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < t.ndim(); ++i) os << (i ? ", " : "") << t.shape(i);
  os << (t.ndim() == 1 ? ",)" : ")");
  return os.str();
}

std::string shape_string(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << (s.size() == 1 ? ",)" : ")");
  return os.str();
}

struct DType {
  nb::dlpack::dtype code;
  const char* name;
};
const DType kBf16{{uint8_t(nb::dlpack::dtype_code::Bfloat), 16, 1}, "bfloat16"};
const DType kF32{{uint8_t(nb::dlpack::dtype_code::Float), 32, 1}, "float32"};
const DType kI32{{uint8_t(nb::dlpack::dtype_code::Int), 32, 1}, "int32"};
const DType kU8{{uint8_t(nb::dlpack::dtype_code::UInt), 8, 1}, "uint8"};

std::string dtype_name(nb::dlpack::dtype d) {
  const char* kinds[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const char* kind = d.code < 7 ? kinds[d.code] : "code";
  std::string s = std::string(kind) + std::to_string(int(d.bits));
  if (d.lanes != 1) s += "x" + std::to_string(int(d.lanes));
  return s;
}

// Shape (-1: any extent), layout, dtype, then the device: in that order, so the layout
// checks can be exercised with host arrays (numpy has no bfloat16). Layouts: kDense
// (row-major), kRows (only the last dimension dense: out and Q rows), kAny (lse); the C++
// API checks what the strides of kRows / kAny tensors allow.
enum class Layout { kDense, kRows, kAny };
void check_tensor(const Tensor& t, const char* name, const DType& dtype, const std::vector<int64_t>& shape,
                  Layout layout = Layout::kDense) {
  const bool strided = layout == Layout::kRows;
  bool ok = t.ndim() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || int64_t(t.shape(i)) == shape[i];
  require(ok, name, " has shape ", shape_string(t), ", expected ", shape_string(shape));
  int64_t expect = 1;
  for (size_t i = t.ndim(); layout != Layout::kAny && i-- > 0;) {
    if (strided && i + 1 < t.ndim()) break;
    require(t.shape(i) == 1 || t.stride(i) == expect, name, strided ? "'s last dimension must be dense" :
            " must be contiguous (row-major)", "; stride ", t.stride(i), " of dimension ", i, " should be ", expect);
    expect *= int64_t(t.shape(i));
  }
  require(t.dtype() == dtype.code, name, " has dtype ", dtype_name(t.dtype()), ", expected ", dtype.name);
  require(t.device_type() == nb::device::cuda::value, name, " must be a CUDA tensor (DLPack device type ",
          t.device_type(), ", CUDA is ", nb::device::cuda::value, ")");
}

struct DecodeTensors {
  Tensor q, block_table, seqlens, out, lse, workspace;
  std::optional<Tensor> q_pe;
};

RowStrides row_strides(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// The decode arguments of a plan with `batch` requests, checked as decode() checks them.
// q, q_pe, out and lse may be strided views (the C++ API checks what their strides allow).
// q of uint8: e4m3 bytes (fp8 caches only): one tensor of d_qk columns (the per-tensor
// cache), or the latent part's 512 columns with the rope part in a bfloat16 q_pe (the
// per-block cache).
bool q_is_e4m3(const Tensor& q) { return q.dtype() == kU8.code; }

void check_decode_tensors(const DecodeConfig& c, int batch, const DecodeTensors& t, size_t workspace_bytes) {
  if (q_is_e4m3(t.q)) {
    require(c.kv_dtype != KvDtype::kBFloat16, "q is uint8 (e4m3 bytes), which needs an fp8 cache (kv_dtype "
            "fp8_e4m3 or fp8_e4m3_block); a ", kv_dtype_name(c.kv_dtype), " cache takes a bfloat16 q");
    if (c.kv_dtype == KvDtype::kFp8E4m3PerBlock) {
      require(t.q_pe.has_value(), "q is uint8 (e4m3 bytes) for the per-block cache: its latent part (512 columns), "
              "with the rope part in q_pe (bfloat16, 64 columns), which is missing");
      check_tensor(t.q, "q", kU8, {batch, c.q_len, c.heads, 512}, Layout::kRows);
    } else {
      require(!t.q_pe, "q is uint8 (e4m3 bytes): it comes as one tensor of d_qk columns, q_pe must be None");
      check_tensor(t.q, "q", kU8, {batch, c.q_len, c.heads, c.d_qk}, Layout::kRows);
    }
  } else {
    check_tensor(t.q, "q", kBf16, {batch, c.q_len, c.heads, t.q_pe ? 512 : c.d_qk}, Layout::kRows);
  }
  if (t.q_pe) check_tensor(*t.q_pe, "q_pe", kBf16, {batch, c.q_len, c.heads, 64}, Layout::kRows);
  check_tensor(t.block_table, "block_table", kI32, {batch, -1});
  check_tensor(t.seqlens, "seqlens", kI32, {batch});
  check_tensor(t.out, "out", kBf16, {batch, c.q_len, c.heads, c.d_v}, Layout::kRows);
  require(t.lse.ndim() == 3, "lse has shape ", shape_string(t.lse), ", expected ",
          shape_string({batch, c.q_len, c.heads}));
  check_tensor(t.lse, "lse", kF32, {batch, c.q_len, c.heads}, Layout::kAny);
  check_tensor(t.workspace, "workspace", kU8, {-1});
  require(t.workspace.shape(0) >= workspace_bytes, "workspace has ", t.workspace.shape(0), " bytes, the plan needs ",
          workspace_bytes);
  require(t.block_table.shape(1) >= 1, "block_table has ", t.block_table.shape(1), " columns, expected >= 1");
}

PlanOptions make_options(int num_ctas, const std::string& policy, int batch_invariant_split_blocks) {
  PlanOptions o;
  o.num_ctas = num_ctas;
  o.batch_invariant_split_blocks = batch_invariant_split_blocks;
  if (policy == "worklist") {
    o.policy = Policy::kWorkList;
  } else if (policy == "static") {
    o.policy = Policy::kStatic;
  } else if (policy == "static_persistent") {
    o.policy = Policy::kStaticPersistent;
  } else {
    throw Error(detail::concat("policy '", policy, "' is not one of: worklist, static, static_persistent"));
  }
  return o;
}

DcpLayout parse_dcp_layout(const std::string& v) {
  if (v == "contiguous") return DcpLayout::kContiguous;
  if (v == "interleaved") return DcpLayout::kInterleaved;
  throw Error(detail::concat("dcp_layout '", v, "' is not one of: contiguous, interleaved"));
}

KvDtype parse_kv_dtype(const std::string& v) {
  for (KvDtype d : {KvDtype::kBFloat16, KvDtype::kFp8E4m3, KvDtype::kFp8E4m3PerBlock}) {
    if (v == kv_dtype_name(d)) return d;
  }
  throw Error(detail::concat("kv_dtype '", v, "' is not one of: bf16, fp8_e4m3, fp8_e4m3_block"));
}

LseBase parse_lse_base(const std::string& v) {
  if (v == "e") return LseBase::kE;
  if (v == "2") return LseBase::k2;
  throw Error(detail::concat("lse_base '", v, "' is not one of: e, 2"));
}

template <class T>
nb::ndarray<nb::numpy, T> to_numpy(const std::vector<T>& v) {
  auto* data = new std::vector<T>(v);
  nb::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(data->data(), {data->size()}, owner);
}

}  // namespace
}  // namespace kbmla::python

NB_MODULE(_kbmla, m) {
  using namespace kbmla;
  using namespace kbmla::python;
  m.doc() = "KV-balanced MLA decode attention for Hopper (sm_90a)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  nb::class_<DecodeConfig>(m, "DecodeConfig")
      .def(
          "__init__",
          [](DecodeConfig* c, int heads, int q_len, float softmax_scale, int d_qk, int d_v, int page_size,
             bool causal, int dcp_world, int dcp_rank, const std::string& dcp_layout, const std::string& kv_dtype) {
            DecodeConfig config;
            config.heads = heads;
            config.q_len = q_len;
            config.d_qk = d_qk;
            config.d_v = d_v;
            config.page_size = page_size;
            config.causal = causal;
            config.softmax_scale = softmax_scale;
            config.dcp_world = dcp_world;
            config.dcp_rank = dcp_rank;
            config.dcp_layout = parse_dcp_layout(dcp_layout);
            config.kv_dtype = parse_kv_dtype(kv_dtype);
            new (c) DecodeConfig(config);
          },
          nb::arg("heads"), nb::arg("q_len"), nb::arg("softmax_scale"), nb::arg("d_qk") = 576, nb::arg("d_v") = 512,
          nb::arg("page_size") = 64, nb::arg("causal") = true, nb::arg("dcp_world") = 1, nb::arg("dcp_rank") = 0,
          nb::arg("dcp_layout") = "contiguous", nb::arg("kv_dtype") = "bf16")
      .def_rw("heads", &DecodeConfig::heads)
      .def_rw("q_len", &DecodeConfig::q_len)
      .def_rw("d_qk", &DecodeConfig::d_qk)
      .def_rw("d_v", &DecodeConfig::d_v)
      .def_rw("page_size", &DecodeConfig::page_size)
      .def_rw("causal", &DecodeConfig::causal)
      .def_rw("softmax_scale", &DecodeConfig::softmax_scale)
      .def_rw("dcp_world", &DecodeConfig::dcp_world)
      .def_rw("dcp_rank", &DecodeConfig::dcp_rank)
      .def_prop_rw(
          "dcp_layout",
          [](const DecodeConfig& c) { return std::string(c.dcp_layout == DcpLayout::kInterleaved ? "interleaved" : "contiguous"); },
          [](DecodeConfig& c, const std::string& v) { c.dcp_layout = parse_dcp_layout(v); })
      .def_prop_rw(
          "kv_dtype",
          [](const DecodeConfig& c) { return std::string(kv_dtype_name(c.kv_dtype)); },
          [](DecodeConfig& c, const std::string& v) { c.kv_dtype = parse_kv_dtype(v); })
      .def("validate", [](const DecodeConfig& c) { validate_config(c); });

  m.def(
      "host_plan",
      [](const DecodeConfig& c, const std::vector<int32_t>& seqlens, int num_ctas, int batch_invariant_split_blocks) {
        validate_config(c);
        require(!seqlens.empty(), "plan: seqlens is empty; batch must be >= 1");
        require(num_ctas >= 1, "plan: num_ctas (", num_ctas, ") must be >= 1 for a host plan");
        const PlanShape s =
            decode_plan_shape(c, int(seqlens.size()), make_options(num_ctas, "worklist", batch_invariant_split_blocks));
        const HostPlan h = make_host_plan(s, seqlens);
        nb::dict d;
        d["work_list"] = to_numpy(h.work_list);
        d["num_splits"] = to_numpy(h.num_splits);
        d["first_slot"] = to_numpy(h.first_slot);
        d["bounds_offset"] = to_numpy(h.bounds_offset);
        d["bounds"] = to_numpy(h.bounds);
        d["zero_fill"] = to_numpy(h.zero_fill);
        d["slot_cost_ns"] = to_numpy(h.cluster_cost);
        d["num_active_slots"] = h.counts.num_active_clusters;
        d["num_q_tiles"] = h.counts.num_q_tiles;
        d["cluster_size"] = s.cluster_size;
        d["partial_slots"] = h.counts.num_slots;
        d["workspace_bytes"] = h.workspace_bytes(c.d_v);
        return d;
      },
      nb::arg("config"), nb::arg("seqlens"), nb::arg("num_ctas") = 132, nb::arg("batch_invariant_split_blocks") = 0,
      "The work-list plan for host seqlens, as the decode would use it (no GPU needed).");

  m.def(
      "check_decode_args",
      [](const DecodeConfig& c, int batch, Tensor q, Tensor block_table, Tensor seqlens, Tensor out, Tensor lse,
         Tensor workspace, size_t workspace_bytes, std::optional<Tensor> q_pe) {
        validate_config(c);
        check_decode_tensors(c, batch, {q, block_table, seqlens, out, lse, workspace, q_pe}, workspace_bytes);
      },
      nb::arg("config"), nb::arg("batch"), nb::arg("q"), nb::arg("block_table"), nb::arg("seqlens"),
      nb::arg("out"), nb::arg("lse"), nb::arg("workspace"), nb::arg("workspace_bytes"), nb::kw_only(),
      nb::arg("q_pe") = nb::none(),
      "The checks decode() makes on its tensors (shapes, dtypes, layout, device), alone.");

  nb::class_<DevicePlan>(m, "Plan")
      .def_static(
          "create",
          [](const DecodeConfig& c, const std::vector<int32_t>& seqlens, int num_ctas, const std::string& policy,
             int batch_invariant_split_blocks) {
            return DevicePlan::create(c, seqlens, make_options(num_ctas, policy, batch_invariant_split_blocks));
          },
          nb::arg("config"), nb::arg("seqlens"), nb::arg("num_ctas") = 0, nb::arg("policy") = "worklist",
          nb::arg("batch_invariant_split_blocks") = 0, "Plans on the host and uploads the plan (once per step).")
      .def_static(
          "create_device_planned",
          [](const DecodeConfig& c, int batch, int num_ctas) {
            return DevicePlan::create_device_planned(c, batch, make_options(num_ctas, "worklist", 0));
          },
          nb::arg("config"), nb::arg("batch"), nb::arg("num_ctas") = 0,
          "A plan made on the GPU by replan(): CUDA-graph capturable.")
      .def(
          "replan",
          [](const DevicePlan& p, Tensor seqlens, uintptr_t stream) {
            check_tensor(seqlens, "seqlens", kI32, {p.batch()});
            p.replan(static_cast<const int32_t*>(seqlens.data()), reinterpret_cast<void*>(stream));
          },
          nb::arg("seqlens"), nb::arg("stream") = 0)
      .def_prop_ro("workspace_bytes", &DevicePlan::workspace_bytes)
      .def_prop_ro("batch", &DevicePlan::batch);

  nb::class_<KvCache>(m, "KvCache")
      .def(
          "__init__",
          [](KvCache* k, Tensor cache) {
            require(cache.ndim() == 3, "cache has shape ", shape_string(cache), ", expected (pages, page_size, d_qk)");
            const bool fp8 = cache.dtype() == kU8.code;
            check_tensor(cache, "cache", fp8 ? kU8 : kBf16, {-1, -1, -1});
            // 656 bytes per token: the per-block-scale format (512 e4m3, 4 fp32 scales, 64 bf16).
            constexpr size_t kBlockTokenBytes = size_t(kv_token_bytes(KvDtype::kFp8E4m3PerBlock, 576));
            const bool per_block = fp8 && cache.shape(2) == kBlockTokenBytes;
            new (k) KvCache(cache.data(), int64_t(cache.shape(0)), int(cache.shape(1)),
                            per_block ? 576 : int(cache.shape(2)),
                            per_block ? KvDtype::kFp8E4m3PerBlock : fp8 ? KvDtype::kFp8E4m3 : KvDtype::kBFloat16);
          },
          nb::arg("cache"), nb::keep_alive<1, 2>(),
          "A paged latent cache [pages, page_size, d_qk] of bfloat16, or of e4m3 bytes as uint8 (a torch "
          "float8_e4m3fn cache: pass cache.view(torch.uint8)), or [pages, page_size, 656] uint8 tokens of the "
          "per-block-scale format (kv_dtype fp8_e4m3_block); its TMA descriptors are made once.")
      .def_prop_ro("kv_dtype", [](const KvCache& k) {
        return std::string(kv_dtype_name(k.dtype()));
      });

  m.def(
      "describe_decode",
      [](const DevicePlan& plan, const KvCache& cache, const std::string& q_dtype) {
        require(q_dtype == "bf16" || q_dtype == "fp8_e4m3", "describe_decode: q_dtype '", q_dtype,
                "' must be bf16 or fp8_e4m3");
        const DecodePath d =
            describe_decode(plan, cache, q_dtype == "fp8_e4m3" ? QDtype::kFp8E4m3 : QDtype::kBFloat16);
        nb::dict r;
        r["kernel"] = d.kernel;
        r["q"] = d.q_operand;
        r["p"] = d.p_operand;
        r["kv_loader"] = d.kv_loader;
        r["combine"] = d.combine;
        r["cta_rows"] = d.cta_rows;
        r["cluster_size"] = d.cluster_size;
        r["fp8_products"] = d.fp8_products;
        r["summary"] = d.summary();
        return r;
      },
      nb::arg("plan"), nb::arg("cache"), nb::arg("q_dtype") = "bf16",
      "The kernels and operand types a decode with this plan and cache takes (what decode() dispatches on), "
      "without launching anything; fp8_products: Q or P enter a tensor-core product as e4m3.");

  m.def(
      "init_workspace",
      [](Tensor workspace, uintptr_t stream) {
        check_tensor(workspace, "workspace", kU8, {-1});
        init_workspace(workspace.data(), workspace.shape(0), reinterpret_cast<void*>(stream));
      },
      nb::arg("workspace"), nb::arg("stream") = 0);

  m.def(
      "decode",
      [](const DevicePlan& plan, const KvCache& cache, Tensor q, Tensor block_table, Tensor seqlens, Tensor out,
         Tensor lse, Tensor workspace, uintptr_t stream, std::optional<Tensor> q_pe, const std::string& lse_base,
         std::optional<Tensor> dcp_global_seqlens, std::optional<Tensor> dcp_kv_offsets,
         std::optional<Tensor> kv_scale, std::optional<Tensor> q_scale) {
        const int B = plan.batch();
        check_decode_tensors(plan.config(), B, {q, block_table, seqlens, out, lse, workspace, q_pe},
                             plan.workspace_bytes());
        DecodeArgs a;
        a.q = q.data();
        a.q_strides = row_strides(q);
        if (q_pe) {
          a.q_pe = q_pe->data();
          a.q_pe_strides = row_strides(*q_pe);
        }
        a.block_table = static_cast<const int32_t*>(block_table.data());
        a.max_pages = int(block_table.shape(1));
        a.seqlens = static_cast<const int32_t*>(seqlens.data());
        a.out = out.data();
        a.out_strides = row_strides(out);
        a.lse = static_cast<float*>(lse.data());
        a.lse_strides = row_strides(lse);
        a.lse_base = parse_lse_base(lse_base);
        if (dcp_global_seqlens) {
          check_tensor(*dcp_global_seqlens, "dcp_global_seqlens", kI32, {B});
          a.dcp_global_seqlens = static_cast<const int32_t*>(dcp_global_seqlens->data());
        }
        if (dcp_kv_offsets) {
          check_tensor(*dcp_kv_offsets, "dcp_kv_offsets", kI32, {B});
          a.dcp_kv_offsets = static_cast<const int32_t*>(dcp_kv_offsets->data());
        }
        if (kv_scale) {
          check_tensor(*kv_scale, "kv_scale", kF32, {1});
          a.kv_scale = static_cast<const float*>(kv_scale->data());
        }
        if (q_is_e4m3(q)) {
          require(q_scale.has_value(), "q is uint8 (e4m3 bytes) and needs q_scale, a float32 tensor of one element "
                  "on the GPU (value = e4m3 x scale)");
          a.q_dtype = QDtype::kFp8E4m3;
        }
        if (q_scale) {
          require(a.q_dtype == QDtype::kFp8E4m3, "q_scale is given but q is bfloat16 (only an e4m3 q has a scale)");
          check_tensor(*q_scale, "q_scale", kF32, {1});
          a.q_scale = static_cast<const float*>(q_scale->data());
        }
        a.workspace = workspace.data();
        a.workspace_bytes = workspace.shape(0);
        a.stream = reinterpret_cast<void*>(stream);
        decode(plan, cache, a);
      },
      nb::arg("plan"), nb::arg("cache"), nb::arg("q"), nb::arg("block_table"), nb::arg("seqlens"), nb::arg("out"),
      nb::arg("lse"), nb::arg("workspace"), nb::arg("stream") = 0, nb::kw_only(), nb::arg("q_pe") = nb::none(),
      nb::arg("lse_base") = "e", nb::arg("dcp_global_seqlens") = nb::none(), nb::arg("dcp_kv_offsets") = nb::none(),
      nb::arg("kv_scale") = nb::none(), nb::arg("q_scale") = nb::none(),
      "One layer's decode: out and lse written on `stream` (an integer cudaStream_t), no allocation, no sync. "
      "q (or q_nope with q_pe), out and lse may be strided views with a dense last dimension. A per-tensor fp8 "
      "cache needs kv_scale, a float32 tensor of one element on the GPU (value = e4m3 x scale). With an fp8 "
      "cache q may be uint8 e4m3 bytes (e.g. a float8_e4m3fn tensor's .view(torch.uint8)) with q_scale, its "
      "float32 [1] scale: all d_qk columns (per-tensor cache), or the latent part's 512 with the rope part in a "
      "bfloat16 q_pe (per-block cache).");

  m.def(
      "dcp_partial_bytes",
      [](int batch, int q_len, int heads) { return dcp_partial_layout(batch, q_len, heads).bytes; },
      nb::arg("batch"), nb::arg("q_len"), nb::arg("heads"),
      "Bytes of one rank's partial (out bf16 [rows, 512], then lse fp32 [rows]).");

  m.def(
      "dcp_partial_views",
      [](int batch, int q_len, int heads) {
        const DcpPartialLayout l = dcp_partial_layout(batch, q_len, heads);
        return nb::make_tuple(l.out_offset, l.lse_offset, l.bytes);
      },
      nb::arg("batch"), nb::arg("q_len"), nb::arg("heads"),
      "(out offset, lse offset, bytes) of a partial buffer, in bytes.");

  m.def(
      "dcp_merge",
      [](Tensor gathered, int world, Tensor out, Tensor lse, uintptr_t stream, const std::string& lse_base) {
        require(out.ndim() == 4, "out has shape ", shape_string(out), ", expected (batch, q_len, heads, 512)");
        const int B = int(out.shape(0)), S = int(out.shape(1)), H = int(out.shape(2));
        check_tensor(out, "out", kBf16, {B, S, H, 512}, Layout::kRows);
        require(lse.ndim() == 3, "lse has shape ", shape_string(lse), ", expected ", shape_string({B, S, H}));
        check_tensor(lse, "lse", kF32, {B, S, H}, Layout::kAny);
        check_tensor(gathered, "gathered", kU8, {int64_t(world) * int64_t(dcp_partial_layout(B, S, H).bytes)});
        DcpMergeArgs m;
        m.gathered = gathered.data();
        m.world = world;
        m.batch = B;
        m.q_len = S;
        m.heads = H;
        m.out = out.data();
        m.out_strides = row_strides(out);
        m.lse = static_cast<float*>(lse.data());
        m.lse_strides = row_strides(lse);
        m.lse_base = parse_lse_base(lse_base);
        m.stream = reinterpret_cast<void*>(stream);
        dcp_merge(m);
      },
      nb::arg("gathered"), nb::arg("world"), nb::arg("out"), nb::arg("lse"), nb::arg("stream") = 0,
      nb::arg("lse_base") = "e",
      "Merges `world` gathered partials (uint8, world x dcp_partial_bytes) by LSE into out / lse.");

  m.def(
      "read_device_errors",
      [](Tensor workspace, uintptr_t stream) {
        check_tensor(workspace, "workspace", kU8, {-1});
        const uint32_t bits = read_device_errors(workspace.data(), reinterpret_cast<void*>(stream));
        return nb::make_tuple(bits, describe_device_errors(bits));
      },
      nb::arg("workspace"), nb::arg("stream") = 0, "(bits, text) of the workspace's error word; synchronises.");
}
