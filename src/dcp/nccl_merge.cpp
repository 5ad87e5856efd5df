// The NCCL path of decode context parallelism: all-gather of the ranks' partials, merge.
#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "kbmla/dcp.hpp"
#include "kbmla/error.hpp"
#include "src/dcp/nccl_api.hpp"

namespace kbmla {

#if KBMLA_HAVE_NCCL
namespace detail {

const NcclApi& nccl_api() {
  static const NcclApi api = [] {
    const char* env = std::getenv("KBMLA_NCCL_LIBRARY");
    const std::string name = env != nullptr && *env != '\0' ? env : "libnccl.so.2";
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      const char* why = dlerror();
      throw Error(detail::concat("dcp: cannot load NCCL from '", name, "' (", why ? why : "unknown error",
                                 "); set KBMLA_NCCL_LIBRARY to the path of libnccl.so.2 (e.g. the one in the "
                                 "nvidia-nccl Python package) or put it on LD_LIBRARY_PATH"));
    }
    auto sym = [&](const char* s) {
      void* f = dlsym(lib, s);
      require(f != nullptr, "dcp: '", name, "' has no symbol ", s, " (NCCL 2.x expected)");
      return f;
    };
    NcclApi a{};
    a.all_gather = reinterpret_cast<decltype(a.all_gather)>(sym("ncclAllGather"));
    a.error_string = reinterpret_cast<decltype(a.error_string)>(sym("ncclGetErrorString"));
    a.comm_init_all = reinterpret_cast<decltype(a.comm_init_all)>(sym("ncclCommInitAll"));
    a.comm_destroy = reinterpret_cast<decltype(a.comm_destroy)>(sym("ncclCommDestroy"));
    a.group_start = reinterpret_cast<decltype(a.group_start)>(sym("ncclGroupStart"));
    a.group_end = reinterpret_cast<decltype(a.group_end)>(sym("ncclGroupEnd"));
    a.comm_count = reinterpret_cast<decltype(a.comm_count)>(sym("ncclCommCount"));
    return a;
  }();
  return api;
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  throw Error(detail::concat("dcp: ", what, " failed: ", nccl_api().error_string(r), " (ncclResult_t ", int(r), ")"));
}

}  // namespace detail

void dcp_allgather_merge(void* nccl_comm, const void* partial, const DcpMergeArgs& args) {
  require(nccl_comm != nullptr, "dcp: nccl_comm is null");
  require(partial != nullptr, "dcp: partial is null");
  require(args.gathered != nullptr, "dcp: args.gathered is null");
  const DcpPartialLayout l = dcp_partial_layout(args.batch, args.q_len, args.heads);
  const detail::NcclApi& nccl = detail::nccl_api();
  ncclComm_t comm = static_cast<ncclComm_t>(nccl_comm);
  int count = 0;
  detail::check_nccl(nccl.comm_count(comm, &count), "ncclCommCount");
  require(count == args.world, "dcp: the communicator has ", count, " ranks but args.world is ", args.world);
  // In-place-safe: NCCL reads `partial` and writes rank r's copy at gathered + r x bytes.
  detail::check_nccl(nccl.all_gather(partial, const_cast<void*>(args.gathered), l.bytes, ncclUint8, comm,
                                     static_cast<cudaStream_t>(args.stream)),
                     "ncclAllGather");
  dcp_merge(args);
}
#else
void dcp_allgather_merge(void*, const void*, const DcpMergeArgs&) {
  throw Error("dcp: kbmla was built without nccl.h (CUDA toolkit's include directory); use your own all-gather "
              "and dcp_merge, or rebuild where nccl.h is found");
}
#endif

}  // namespace kbmla
