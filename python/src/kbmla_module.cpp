// Python binding of the kbmla C++ API (nanobind over DLPack): tensors from torch, CuPy,
// JAX or anything else that speaks DLPack are used in place, without copies. Every
// argument is checked here, before the C++ API checks it again, with the same kind of
// message (the value and what is allowed); kbmla::Error surfaces as ValueError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

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

// Shape (-1: any extent), row-major contiguity, dtype, then the device: in that order, so
// the layout checks can be exercised with host arrays (numpy has no bfloat16).
void check_tensor(const Tensor& t, const char* name, const DType& dtype, const std::vector<int64_t>& shape) {
  bool ok = t.ndim() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || int64_t(t.shape(i)) == shape[i];
  require(ok, name, " has shape ", shape_string(t), ", expected ", shape_string(shape));
  int64_t expect = 1;
  for (size_t i = t.ndim(); i-- > 0;) {
    require(t.shape(i) == 1 || t.stride(i) == expect, name, " must be contiguous (row-major); stride ", t.stride(i),
            " of dimension ", i, " should be ", expect);
    expect *= int64_t(t.shape(i));
  }
  require(t.dtype() == dtype.code, name, " has dtype ", dtype_name(t.dtype()), ", expected ", dtype.name);
  require(t.device_type() == nb::device::cuda::value, name, " must be a CUDA tensor (DLPack device type ",
          t.device_type(), ", CUDA is ", nb::device::cuda::value, ")");
}

struct DecodeTensors {
  Tensor q, block_table, seqlens, out, lse, workspace;
};

// The decode arguments of a plan with `batch` requests, checked as decode() checks them.
void check_decode_tensors(const DecodeConfig& c, int batch, const DecodeTensors& t, size_t workspace_bytes) {
  check_tensor(t.q, "q", kBf16, {batch, c.q_len, c.heads, c.d_qk});
  check_tensor(t.block_table, "block_table", kI32, {batch, -1});
  check_tensor(t.seqlens, "seqlens", kI32, {batch});
  check_tensor(t.out, "out", kBf16, {batch, c.q_len, c.heads, c.d_v});
  check_tensor(t.lse, "lse", kF32, {batch, c.q_len, c.heads});
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
             bool causal) {
            new (c) DecodeConfig{heads, q_len, d_qk, d_v, page_size, causal, softmax_scale};
          },
          nb::arg("heads"), nb::arg("q_len"), nb::arg("softmax_scale"), nb::arg("d_qk") = 576, nb::arg("d_v") = 512,
          nb::arg("page_size") = 64, nb::arg("causal") = true)
      .def_rw("heads", &DecodeConfig::heads)
      .def_rw("q_len", &DecodeConfig::q_len)
      .def_rw("d_qk", &DecodeConfig::d_qk)
      .def_rw("d_v", &DecodeConfig::d_v)
      .def_rw("page_size", &DecodeConfig::page_size)
      .def_rw("causal", &DecodeConfig::causal)
      .def_rw("softmax_scale", &DecodeConfig::softmax_scale)
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
         Tensor workspace, size_t workspace_bytes) {
        validate_config(c);
        check_decode_tensors(c, batch, {q, block_table, seqlens, out, lse, workspace}, workspace_bytes);
      },
      nb::arg("config"), nb::arg("batch"), nb::arg("q"), nb::arg("block_table"), nb::arg("seqlens"),
      nb::arg("out"), nb::arg("lse"), nb::arg("workspace"), nb::arg("workspace_bytes"),
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
            check_tensor(cache, "cache", kBf16, {-1, -1, -1});
            new (k) KvCache(cache.data(), int64_t(cache.shape(0)), int(cache.shape(1)), int(cache.shape(2)));
          },
          nb::arg("cache"), nb::keep_alive<1, 2>(),
          "A bf16 paged latent cache [pages, page_size, d_qk]; its TMA descriptor is made once.");

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
         Tensor lse, Tensor workspace, uintptr_t stream) {
        check_decode_tensors(plan.config(), plan.batch(), {q, block_table, seqlens, out, lse, workspace},
                             plan.workspace_bytes());
        DecodeArgs a;
        a.q = q.data();
        a.block_table = static_cast<const int32_t*>(block_table.data());
        a.max_pages = int(block_table.shape(1));
        a.seqlens = static_cast<const int32_t*>(seqlens.data());
        a.out = out.data();
        a.lse = static_cast<float*>(lse.data());
        a.workspace = workspace.data();
        a.workspace_bytes = workspace.shape(0);
        a.stream = reinterpret_cast<void*>(stream);
        decode(plan, cache, a);
      },
      nb::arg("plan"), nb::arg("cache"), nb::arg("q"), nb::arg("block_table"), nb::arg("seqlens"), nb::arg("out"),
      nb::arg("lse"), nb::arg("workspace"), nb::arg("stream") = 0,
      "One layer's decode: out and lse written on `stream` (an integer cudaStream_t), no allocation, no sync.");

  m.def(
      "read_device_errors",
      [](Tensor workspace, uintptr_t stream) {
        check_tensor(workspace, "workspace", kU8, {-1});
        const uint32_t bits = read_device_errors(workspace.data(), reinterpret_cast<void*>(stream));
        return nb::make_tuple(bits, describe_device_errors(bits));
      },
      nb::arg("workspace"), nb::arg("stream") = 0, "(bits, text) of the workspace's error word; synchronises.");
}
