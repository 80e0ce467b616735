// libccl as a torch.distributed backend: a c10d::Backend on torch 2.x, a
// c10d::ProcessGroup on torch 1.13, whose operations have the same
// signatures (CclBase below is the one difference).
//
// Every operation is queued, in issue order, to one worker thread per
// process group that runs the blocking libccl call and then completes the
// operation's Work and its future. Every rank issues collectives in the same
// order, so one queue keeps them matched; the caller's thread returns at once
// and computes while the worker communicates (what DDP's buckets need).
#include <torch/extension.h>
#include <pybind11/chrono.h>

#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/core/ivalue.h>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ccl.h"

namespace {

// torch 2.x's ProcessGroup dispatches to one Backend per device type;
// torch 1.13's ProcessGroup is the backend itself.
#if TORCH_VERSION_MAJOR >= 2
using CclBase = c10d::Backend;
#else
using CclBase = c10d::ProcessGroup;
#endif

using c10d::OpType;
using Tensors = std::vector<at::Tensor>;

// libccl's dtype for a tensor's; throws for those it has no equal for.
ccl_dtype_t to_ccl(at::ScalarType t, const char* what) {
  switch (t) {
    case at::kChar: return CCL_INT8;
    case at::kByte: return CCL_UINT8;
    case at::kBool: return CCL_UINT8;
    case at::kInt: return CCL_INT32;
    case at::kLong: return CCL_INT64;
    case at::kHalf: return CCL_FLOAT16;
    case at::kBFloat16: return CCL_BFLOAT16;
    case at::kFloat: return CCL_FLOAT32;
    case at::kDouble: return CCL_FLOAT64;
    default:
      TORCH_CHECK(false, "ccl: ", what, ": tensors of ", t, " are not supported (int8, uint8, bool, int32, int64, ",
                  "float16, bfloat16, float32, float64 are)");
  }
}

ccl_op_t to_ccl(const c10d::ReduceOp& op, at::ScalarType t, const char* what) {
  ccl_op_t r;
  switch (op) {
    case c10d::ReduceOp::SUM: r = CCL_SUM; break;
    case c10d::ReduceOp::AVG: r = CCL_AVG; break;
    case c10d::ReduceOp::PRODUCT: r = CCL_PROD; break;
    case c10d::ReduceOp::MIN: r = CCL_MIN; break;
    case c10d::ReduceOp::MAX: r = CCL_MAX; break;
    default: TORCH_CHECK(false, "ccl: ", what, ": reduce op ", (int)op, " is not supported (SUM, AVG, PRODUCT, MIN, MAX are)");
  }
  // A sum or product of bools is no bool; min and max are AND and OR.
  TORCH_CHECK(t != at::kBool || r == CCL_MIN || r == CCL_MAX, "ccl: ", what,
              ": bool tensors reduce with MIN or MAX only");
  return r;
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "ccl: ", what, ": tensor on ", t.device(), "; this backend moves CPU tensors");
  TORCH_CHECK(t.is_contiguous(), "ccl: ", what, ": tensors must be contiguous");
  TORCH_CHECK(!t.is_sparse(), "ccl: ", what, ": sparse tensors are not supported");
}

const at::Tensor& single(const Tensors& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "ccl: ", what, ": takes one tensor per call (got ", ts.size(), ")");
  check_tensor(ts[0], what);
  return ts[0];
}

void check_same(const at::Tensor& a, const at::Tensor& b, const char* what) {
  check_tensor(b, what);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "ccl: ", what, ": tensors of ", a.scalar_type(), " and ",
              b.scalar_type(), " in one call");
  TORCH_CHECK(a.numel() == b.numel(), "ccl: ", what, ": tensors of ", a.numel(), " and ", b.numel(),
              " elements where the sizes must match");
}

// Coalesced pairs: as many outputs as inputs, each pair of one dtype, an
// output of out_scale x (an input of in_scale x) the other's elements.
void check_pairs(const Tensors& outs, const Tensors& ins, const char* what, int64_t out_scale, int64_t in_scale) {
  TORCH_CHECK(!ins.empty() && outs.size() == ins.size(), "ccl: ", what, ": ", outs.size(), " outputs for ",
              ins.size(), " inputs");
  for (size_t i = 0; i < ins.size(); i++) {
    check_tensor(ins[i], what);
    check_tensor(outs[i], what);
    TORCH_CHECK(outs[i].scalar_type() == ins[i].scalar_type() && outs[i].numel() * in_scale == ins[i].numel() * out_scale,
                "ccl: ", what, ": pair ", i, ": an output of ", outs[i].numel(), " x ", outs[i].scalar_type(),
                " for an input of ", ins[i].numel(), " x ", ins[i].scalar_type());
  }
}

// call(i) for i in [0, n), recorded in one libccl group so that the calls
// progress together; stops at the first that fails, and ends the group
// either way.
ccl_status_t grouped(size_t n, const std::function<ccl_status_t(size_t)>& call) {
  ccl_status_t st = ccl_group_start();
  for (size_t i = 0; i < n && st == CCL_OK; i++) st = call(i);
  ccl_status_t end = ccl_group_end();
  return st != CCL_OK ? st : end;
}

// Equal-sized tensors as the one flat buffer a libccl call takes, and back.
at::Tensor flatten(const Tensors& ts) {
  Tensors flat;
  for (auto& t : ts) flat.push_back(t.view({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor& flat, const Tensors& outs) {
  for (size_t i = 0; i < outs.size(); i++) {
    int64_t n = outs[i].numel();
    outs[i].view({-1}).copy_(flat.narrow(0, (int64_t)i * n, n));
  }
}

// One queued operation's handle: torch's Work plus a future holding the outputs.
class WorkCCL : public c10d::Work {
 public:
  WorkCCL(int rank, OpType type, Tensors outputs)
      : c10d::Work(rank, type), outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  void complete(std::exception_ptr error) {
    finish(error);  // wakes wait(), sets isCompleted/isSuccess/exception
    if (error) future_->setError(error);
    else future_->markCompleted(c10::IValue(outputs_));
  }

 private:
  Tensors outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupCCL : public CclBase {
 public:
  ProcessGroupCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, double timeout_s)
      : CclBase(rank, size) {
    // Rank 0 makes the rendezvous point and publishes it through the store,
    // as the NCCL backend does with its unique id.
    ccl_unique_id_t id;
    const std::string key = "ccl_unique_id";
    if (rank == 0) {
      ccl_status_t st = ccl_get_unique_id(&id);
      TORCH_CHECK(st == CCL_OK, "ccl: rank 0 cannot start the rendezvous: ", ccl_status_string(st));
      store->set(key, std::vector<uint8_t>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      std::vector<uint8_t> bytes = store->get(key);
      TORCH_CHECK(bytes.size() == sizeof(id.internal), "ccl: the store's ", key, " holds ", bytes.size(),
                  " bytes, not ", sizeof(id.internal));
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
    ccl_config_t cfg = CCL_CONFIG_INIT;
    cfg.timeout_s = timeout_s;
    ccl_status_t st;
    {
      pybind11::gil_scoped_release nogil;  // init waits for every rank
      st = ccl_comm_init_rank_config(&comm_, size, id, rank, &cfg);
    }
    TORCH_CHECK(st == CCL_OK, "ccl: init of rank ", rank, " of ", size, " failed: ", ccl_status_string(st),
                " (the CCL WARN line above says why)");
    worker_ = std::thread([this] { run(); });
  }

  ~ProcessGroupCCL() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();  // queued operations finish first
    if (comm_) ccl_comm_destroy(comm_);
  }

  const std::string getBackendName() const override { return "libccl"; }

  c10::intrusive_ptr<c10d::Work> broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    const char* what = "broadcast";
    at::Tensor t = single(tensors, what);
    int root = (int)opts.rootRank;
    return enqueue(OpType::BROADCAST, {t}, [=] {
      return ccl_broadcast(t.data_ptr(), t.data_ptr(), t.numel(), to_ccl(t.scalar_type(), what), root, comm_);
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    const char* what = "allreduce";
    at::Tensor t = single(tensors, what);
    ccl_op_t op = to_ccl(opts.reduceOp, t.scalar_type(), what);
    return enqueue(OpType::ALLREDUCE, {t}, [=] {
      return ccl_all_reduce(t.data_ptr(), t.data_ptr(), t.numel(), to_ccl(t.scalar_type(), what), op, comm_);
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(Tensors& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    const char* what = "allreduce_coalesced";
    TORCH_CHECK(!tensors.empty(), "ccl: ", what, ": no tensors");
    for (auto& t : tensors) {
      check_tensor(t, what);
      TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "ccl: ", what, ": mixed dtypes");
    }
    ccl_op_t op = to_ccl(opts.reduceOp, tensors[0].scalar_type(), what);
    Tensors ts = tensors;
    return enqueue(OpType::ALLREDUCE_COALESCED, ts, [=] {
      return grouped(ts.size(), [&](size_t i) {  // one call per tensor
        const at::Tensor& t = ts[i];
        return ccl_all_reduce(t.data_ptr(), t.data_ptr(), t.numel(), to_ccl(t.scalar_type(), what), op, comm_);
      });
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    const char* what = "reduce";
    at::Tensor t = single(tensors, what);
    ccl_op_t op = to_ccl(opts.reduceOp, t.scalar_type(), what);
    int root = (int)opts.rootRank;
    return enqueue(OpType::REDUCE, {t}, [=] {
      return ccl_reduce(t.data_ptr(), t.data_ptr(), t.numel(), to_ccl(t.scalar_type(), what), op, root, comm_);
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                           const c10d::AllgatherOptions&) override {
    const char* what = "allgather";
    at::Tensor in = single(inputs, what);
    TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == getSize(), "ccl: ", what,
                ": needs one list of ", getSize(), " output tensors");
    Tensors outs = outputs[0];
    for (auto& o : outs) check_same(in, o, what);
    return enqueue(OpType::ALLGATHER, outs, [=] {
      at::Tensor flat = at::empty({(int64_t)outs.size() * in.numel()}, in.options());
      ccl_status_t st =
          ccl_all_gather(in.data_ptr(), flat.data_ptr(), in.numel(), to_ccl(in.scalar_type(), what), comm_);
      if (st == CCL_OK) unflatten(flat, outs);
      return st;
    });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    const char* what = "_allgather_base";
    check_tensor(input, what);
    check_tensor(output, what);
    TORCH_CHECK(output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(), "ccl: ",
                what, ": the output needs ", getSize(), " x the input's ", input.numel(), " elements of ",
                input.scalar_type());
    at::Tensor in = input, out = output;
    return enqueue(OpType::_ALLGATHER_BASE, {out}, [=] {
      return ccl_all_gather(in.data_ptr(), out.data_ptr(), in.numel(), to_ccl(in.scalar_type(), what), comm_);
    });
  }

#if TORCH_VERSION_MAJOR >= 2
  // torch 2.x's coalesced all_gather_into_tensor and reduce_scatter_tensor
  // (what dist._coalescing_manager and FSDP call): one libccl call per
  // pair of tensors, all in one group, so they progress together.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                                                 const c10d::AllgatherOptions&) override {
    const char* what = "allgather_into_tensor_coalesced";
    check_pairs(outputs, inputs, what, /*out_scale=*/getSize(), /*in_scale=*/1);
    Tensors outs = outputs, ins = inputs;
    return enqueue(OpType::COALESCED, outs, [=] {
      return grouped(ins.size(), [&](size_t i) {
        return ccl_all_gather(ins[i].data_ptr(), outs[i].data_ptr(), ins[i].numel(),
                              to_ccl(ins[i].scalar_type(), what), comm_);
      });
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    const char* what = "reduce_scatter_tensor_coalesced";
    check_pairs(outputs, inputs, what, /*out_scale=*/1, /*in_scale=*/getSize());
    ccl_op_t op = to_ccl(opts.reduceOp, outputs[0].scalar_type(), what);
    Tensors outs = outputs, ins = inputs;
    return enqueue(OpType::COALESCED, outs, [=] {
      return grouped(ins.size(), [&](size_t i) {
        return ccl_reduce_scatter(ins[i].data_ptr(), outs[i].data_ptr(), outs[i].numel(),
                                  to_ccl(outs[i].scalar_type(), what), op, comm_);
      });
    });
  }
#endif

  c10::intrusive_ptr<c10d::Work> gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                        const c10d::GatherOptions& opts) override {
    const char* what = "gather";
    at::Tensor in = single(inputs, what);
    int root = (int)opts.rootRank;
    Tensors outs;
    if (getRank() == root) {
      TORCH_CHECK(outputs.size() == 1 && (int)outputs[0].size() == getSize(), "ccl: ", what, ": the root needs ",
                  "one list of ", getSize(), " output tensors");
      outs = outputs[0];
      for (auto& o : outs) check_same(in, o, what);
    } else {
      TORCH_CHECK(outputs.empty(), "ccl: ", what, ": only the root passes output tensors");
    }
    return enqueue(OpType::GATHER, outs, [=] {
      at::Tensor flat = outs.empty() ? at::Tensor() : at::empty({getSize() * in.numel()}, in.options());
      ccl_status_t st = ccl_gather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, in.numel(),
                                   to_ccl(in.scalar_type(), what), root, comm_);
      if (st == CCL_OK) unflatten(flat, outs);
      return st;
    });
  }

  c10::intrusive_ptr<c10d::Work> scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    const char* what = "scatter";
    at::Tensor out = single(outputs, what);
    int root = (int)opts.rootRank;
    Tensors ins;
    if (getRank() == root) {
      TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == getSize(), "ccl: ", what, ": the root needs ",
                  "one list of ", getSize(), " input tensors");
      ins = inputs[0];
      for (auto& i : ins) check_same(out, i, what);
    } else {
      TORCH_CHECK(inputs.empty(), "ccl: ", what, ": only the root passes input tensors");
    }
    return enqueue(OpType::SCATTER, {out}, [=] {
      at::Tensor flat = ins.empty() ? at::Tensor() : flatten(ins);
      return ccl_scatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), out.numel(),
                         to_ccl(out.scalar_type(), what), root, comm_);
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const char* what = "reduce_scatter";
    at::Tensor out = single(outputs, what);
    TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == getSize(), "ccl: ", what, ": needs one list of ",
                getSize(), " input tensors");
    Tensors ins = inputs[0];
    for (auto& i : ins) check_same(out, i, what);
    ccl_op_t op = to_ccl(opts.reduceOp, out.scalar_type(), what);
    return enqueue(OpType::REDUCE_SCATTER, {out}, [=] {
      at::Tensor flat = flatten(ins);
      return ccl_reduce_scatter(flat.data_ptr(), out.data_ptr(), out.numel(), to_ccl(out.scalar_type(), what), op,
                                comm_);
    });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    const char* what = "_reduce_scatter_base";
    check_tensor(input, what);
    check_tensor(output, what);
    TORCH_CHECK(input.numel() == output.numel() * getSize() && output.scalar_type() == input.scalar_type(), "ccl: ",
                what, ": the input needs ", getSize(), " x the output's ", output.numel(), " elements of ",
                output.scalar_type());
    ccl_op_t op = to_ccl(opts.reduceOp, output.scalar_type(), what);
    at::Tensor in = input, out = output;
    return enqueue(OpType::_REDUCE_SCATTER_BASE, {out}, [=] {
      return ccl_reduce_scatter(in.data_ptr(), out.data_ptr(), out.numel(), to_ccl(out.scalar_type(), what), op,
                                comm_);
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits, std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions&) override {
    const char* what = "alltoall_base";
    check_tensor(input, what);
    check_tensor(output, what);
    TORCH_CHECK(input.scalar_type() == output.scalar_type(), "ccl: ", what, ": input of ", input.scalar_type(),
                ", output of ", output.scalar_type());
    int n = getSize();
    at::Tensor in = input, out = output;
    if (outputSplits.empty() && inputSplits.empty()) {
      TORCH_CHECK(in.numel() == out.numel() && in.numel() % n == 0, "ccl: ", what, ": input and output need the ",
                  "same number of elements, a multiple of ", n, " (ranks)");
      return enqueue(OpType::ALLTOALL_BASE, {out}, [=] {
        return ccl_all_to_all(in.data_ptr(), out.data_ptr(), in.numel() / n, to_ccl(in.scalar_type(), what), comm_);
      });
    }
    // Splits count rows (the first dimension); empty means equal parts.
    auto layout = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* side) {
      std::vector<size_t> counts(n), displs(n);
      int64_t rows = t.dim() ? t.size(0) : 1, row = rows ? t.numel() / rows : 0, at_ = 0;
      TORCH_CHECK(splits.empty() || (int)splits.size() == n, "ccl: ", what, ": ", side, " splits need ", n,
                  " entries");
      for (int p = 0; p < n; p++) {
        int64_t s = splits.empty() ? rows / n : splits[p];
        TORCH_CHECK(s >= 0, "ccl: ", what, ": negative ", side, " split");
        counts[p] = (size_t)(s * row);
        displs[p] = (size_t)at_;
        at_ += s * row;
      }
      TORCH_CHECK(at_ <= t.numel(), "ccl: ", what, ": the ", side, " splits add up to ", at_, " elements, past the ",
                  side, " tensor's ", t.numel());
      return std::make_pair(counts, displs);
    };
    auto s = layout(in, inputSplits, "input");
    auto r = layout(out, outputSplits, "output");
    return enqueue(OpType::ALLTOALL_BASE, {out}, [=] {
      return ccl_all_to_all_v(in.data_ptr(), s.first.data(), s.second.data(), out.data_ptr(), r.first.data(),
                              r.second.data(), to_ccl(in.scalar_type(), what), comm_);
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions&) override {
    const char* what = "alltoall";
    int n = getSize();
    TORCH_CHECK((int)outputs.size() == n && (int)inputs.size() == n, "ccl: ", what, ": needs ", n,
                " input and ", n, " output tensors");
    for (int p = 0; p < n; p++) {
      check_tensor(inputs[p], what);
      check_tensor(outputs[p], what);
      TORCH_CHECK(inputs[p].scalar_type() == inputs[0].scalar_type() &&
                      outputs[p].scalar_type() == inputs[0].scalar_type(),
                  "ccl: ", what, ": mixed dtypes");
    }
    Tensors ins = inputs, outs = outputs;
    return enqueue(OpType::ALLTOALL, outs, [=] {
      // Separate tensors: one send and one receive per peer, in one group.
      return grouped((size_t)n, [&](size_t i) {
        int p = (int)i;
        ccl_status_t st = ccl_send(ins[p].data_ptr(), ins[p].numel(), to_ccl(ins[p].scalar_type(), what), p, comm_);
        return st != CCL_OK ? st
                            : ccl_recv(outs[p].data_ptr(), outs[p].numel(), to_ccl(outs[p].scalar_type(), what), p,
                                       comm_);
      });
    });
  }

  c10::intrusive_ptr<c10d::Work> send(Tensors& tensors, int dst, int) override {
    const char* what = "send";
    at::Tensor t = single(tensors, what);
    return enqueue(OpType::SEND, {t}, [=] {
      return ccl_send(t.data_ptr(), t.numel(), to_ccl(t.scalar_type(), what), dst, comm_);
    });
  }

  c10::intrusive_ptr<c10d::Work> recv(Tensors& tensors, int src, int) override {
    const char* what = "recv";
    at::Tensor t = single(tensors, what);
    return enqueue(OpType::RECV, {t}, [=] {
      return ccl_recv(t.data_ptr(), t.numel(), to_ccl(t.scalar_type(), what), src, comm_);
    });
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(Tensors&, int) override {
    TORCH_CHECK(false, "ccl: recv from any source is not supported: name the source rank");
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return enqueue(OpType::BARRIER, {}, [=] { return ccl_barrier(comm_); });
  }

 private:
  struct Task {
    c10::intrusive_ptr<WorkCCL> work;
    std::function<ccl_status_t()> call;
  };

  c10::intrusive_ptr<c10d::Work> enqueue(OpType type, Tensors outputs, std::function<ccl_status_t()> call) {
    auto work = c10::make_intrusive<WorkCCL>(getRank(), type, std::move(outputs));
    {
      std::lock_guard<std::mutex> g(mu_);
      queue_.push_back(Task{work, std::move(call)});
    }
    cv_.notify_one();
    return work;
  }

  void run() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        ccl_status_t st = task.call();
        if (st != CCL_OK)
          throw std::runtime_error(std::string("ccl: ") + ccl_status_string(st) + ": " + ccl_comm_last_error(comm_));
      } catch (...) {
        error = std::current_exception();
      }
      task.work->complete(error);
    }
  }

  ccl_comm_t* comm_ = nullptr;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;
};

c10::intrusive_ptr<CclBase> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   const std::chrono::duration<float>& timeout) {
  return c10::make_intrusive<ProcessGroupCCL>(store, rank, size, (double)timeout.count());
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "libccl as a torch.distributed process group";
  m.def("create_process_group", &create, "store, rank, world size, timeout -> a ccl process group",
        pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"));
}
