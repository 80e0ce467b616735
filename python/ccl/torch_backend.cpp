// libccl as a torch.distributed backend: a c10d::Backend on torch 2.x, a
// c10d::ProcessGroup on torch 1.13, whose operations have the same
// signatures (CclBase below is the one difference).
//
// Every operation is queued, in issue order, to one worker thread per
// process group that runs the blocking libccl call and then completes the
// operation's Work and its future. Every rank issues collectives in the same
// order, so one queue keeps them matched; the caller's thread returns at once
// and computes while the worker communicates (what DDP's buckets need).
//
// CUDA tensors on torch 2.x follow NCCL's semantics instead: the worker
// orders the call on a stream of the group's (libccl's stream-ordered
// calls), after the caller's stream as it was at the call, and the Work
// completes once the call is issued; its wait() and its future order the
// waiter's current stream after the call, without blocking the CPU.
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
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <pthread.h>
#include <sched.h>

#include "ccl.h"
#include "torch_flight.h"

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

// Stream-ordered calls need a CUDA stream's handle, which torch 1.13's
// c10::Stream does not give: there the worker waits for the caller's
// stream and the call completes before its Work does.
#if TORCH_VERSION_MAJOR >= 2
constexpr bool kStreamOrdered = true;
ccl_stream_t stream_handle(const c10::Stream& s) { return static_cast<ccl_stream_t>(s.native_handle()); }
#else
constexpr bool kStreamOrdered = false;
ccl_stream_t stream_handle(const c10::Stream&) { return nullptr; }
#endif

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

// A reduce op for libccl: a built-in one, or a premultiplied sum whose
// scalar (one element of the tensor's dtype) becomes a libccl op on the
// worker, around the call (ccl_op_create_premul_sum).
struct CclOp {
  ccl_op_t op = CCL_SUM;
  at::Tensor premul;  // defined for PREMUL_SUM
};

at::Tensor premul_scalar(const c10d::ReduceOp& op, at::ScalarType t, const char* what) {
  auto* sup = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(sup, "ccl: ", what, ": PREMUL_SUM without its factor (make it with dist._make_nccl_premul_sum)");
#if TORCH_VERSION_MAJOR >= 2
  at::Tensor f = sup->tensor_factor;
#else
  at::Tensor f = sup->tensor_factors.empty() ? at::Tensor() : sup->tensor_factors[0];
#endif
  if (!f.defined()) return at::full({1}, sup->double_factor, at::TensorOptions().dtype(t));
  TORCH_CHECK(f.numel() == 1, "ccl: ", what, ": a PREMUL_SUM factor of ", f.numel(), " elements");
  return f.detach().to(at::kCPU).to(t).reshape({1}).contiguous();
}

CclOp to_ccl(const c10d::ReduceOp& op, at::ScalarType t, const char* what) {
  CclOp r;
  switch (op) {
    case c10d::ReduceOp::SUM: r.op = CCL_SUM; break;
    case c10d::ReduceOp::AVG: r.op = CCL_AVG; break;
    case c10d::ReduceOp::PRODUCT: r.op = CCL_PROD; break;
    case c10d::ReduceOp::MIN: r.op = CCL_MIN; break;
    case c10d::ReduceOp::MAX: r.op = CCL_MAX; break;
    case c10d::ReduceOp::BAND: r.op = CCL_BAND; break;
    case c10d::ReduceOp::BOR: r.op = CCL_BOR; break;
    case c10d::ReduceOp::BXOR: r.op = CCL_BXOR; break;
    case c10d::ReduceOp::PREMUL_SUM: r.premul = premul_scalar(op, t, what); break;
    default: TORCH_CHECK(false, "ccl: ", what, ": reduce op ", (int)op, " is not supported");
  }
  bool bitwise = r.op == CCL_BAND || r.op == CCL_BOR || r.op == CCL_BXOR;
  TORCH_CHECK(!bitwise || !at::isFloatingType(t), "ccl: ", what, ": ", (int)op,
              " (a bitwise op) needs an integer or bool tensor, not ", t);
  // A sum or product of bools is no bool; min, max and the bitwise ops are.
  TORCH_CHECK(t != at::kBool || r.op == CCL_MIN || r.op == CCL_MAX || bitwise, "ccl: ", what,
              ": bool tensors reduce with MIN, MAX, BAND, BOR or BXOR only");
  TORCH_CHECK(!r.premul.defined() || at::isFloatingType(t), "ccl: ", what,
              ": PREMUL_SUM needs a floating-point tensor, not ", t);
  return r;
}

// call(op) with o as a libccl op: a premultiplied sum is made for the
// call and destroyed after it was issued.
ccl_status_t with_op(ccl_comm_t* comm, const CclOp& o, ccl_dtype_t dt, const std::function<ccl_status_t(ccl_op_t)>& call) {
  if (!o.premul.defined()) return call(o.op);
  ccl_op_t op;
  ccl_status_t st = ccl_op_create_premul_sum(comm, dt, o.premul.data_ptr(), &op);
  if (st != CCL_OK) return st;
  st = call(op);
  ccl_status_t d = ccl_op_destroy(comm, op);
  return st != CCL_OK ? st : d;
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "ccl: ", what, ": tensor on ", t.device(),
              "; this backend moves CPU and CUDA tensors");
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
// either way (ordered on stream, where one is given).
ccl_status_t grouped(size_t n, const std::function<ccl_status_t(size_t)>& call, ccl_stream_t stream = nullptr) {
  ccl_status_t st = ccl_group_start();
  for (size_t i = 0; i < n && st == CCL_OK; i++) st = call(i);
  ccl_status_t end = stream ? ccl_group_end_stream(stream) : ccl_group_end();
  return st != CCL_OK ? st : end;
}

// The stream the worker orders its running call on (CUDA tensors, torch
// 2.x), null otherwise. It is also the worker's current stream then, so
// the copies a call makes around its libccl call (the list forms' flatten
// and unflatten) are in the same order with no wait of their own.
thread_local ccl_stream_t ordered_on = nullptr;

// For a scope of the worker's: its calls ordered on s, which is also its
// current stream.
struct OrderedOn {
  explicit OrderedOn(const c10::Stream& s) : current(s) { ordered_on = stream_handle(s); }
  ~OrderedOn() { ordered_on = nullptr; }
  c10::StreamGuard current;
};

// fn's libccl calls, ordered on the worker's stream where there is one
// (one libccl group ended on it), else run as they are.
ccl_status_t issue(const std::function<ccl_status_t()>& fn) {
  if (!ordered_on) return fn();
  return grouped(1, [&](size_t) { return fn(); }, ordered_on);
}

// fn run to completion before it returns even where the worker orders
// calls on a stream (a receive from any source: its sender is known only
// once it ran): the stream's work before it is waited for first, on the
// host.
ccl_status_t blocking(const std::function<ccl_status_t()>& fn) {
  if (!ordered_on) return fn();
  ccl_stream_t s = ordered_on;
  ordered_on = nullptr;
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  impl.getStream(impl.getDevice()).synchronize();  // the worker's current stream: the one ordered on
  ccl_status_t st = fn();
  ordered_on = s;
  return st;
}

// CUDA tensors where calls are not stream-ordered (torch 1.13): libccl
// reads and writes device memory itself (staged, or GPU-resident where
// every rank shares the GPU), on streams of its own. So the worker first
// waits for the caller's stream (the inputs are written), and a copy the
// worker makes around a libccl call (the list forms' flatten and
// unflatten) is waited for before libccl reads it, or before the Work
// completes.
void settle(const at::Tensor& t) {
  if (ordered_on || !t.defined() || !t.is_cuda()) return;
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  impl.getStream(t.device()).synchronize();
}

// Equal-sized tensors as the one flat buffer a libccl call takes, and back.
at::Tensor flatten(const Tensors& ts) {
  Tensors flat;
  for (auto& t : ts) flat.push_back(t.view({-1}));
  at::Tensor r = at::cat(flat);
  settle(r);
  return r;
}

void unflatten(const at::Tensor& flat, const Tensors& outs) {
  for (size_t i = 0; i < outs.size(); i++) {
    int64_t n = outs[i].numel();
    outs[i].view({-1}).copy_(flat.narrow(0, (int64_t)i * n, n));
  }
  if (!outs.empty()) settle(outs[0]);
}

// One queued operation's handle: torch's Work plus a future holding the outputs.
// Runs future completions (and with them the callbacks chained on the
// futures) off the worker thread. A callback may issue another call of
// the same process group and wait for it (PowerSGD's DDP hook does): run
// in the worker, it would wait for the worker itself. Here a callback that
// blocks holds one thread, and the next completion starts another.
class Completer {
 public:
  ~Completer() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void push(std::function<void()> fn) {
    std::lock_guard<std::mutex> g(mu_);
    queue_.push_back(std::move(fn));
    if ((size_t)(idle_ + starting_) < queue_.size()) {
      starting_++;
      threads_.emplace_back([this] { loop(); });
    } else {
      cv_.notify_one();
    }
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> g(mu_);
    starting_--;
    for (;;) {
      idle_++;
      cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
      idle_--;
      if (queue_.empty()) return;  // stopping, nothing left
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      g.unlock();
      fn();
      g.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  int idle_ = 0, starting_ = 0;
  bool stop_ = false;
};

// The CUDA device of a call's tensors, if any: its future is a CUDA one.
std::vector<c10::Device> cuda_devices(const Tensors& ts) {
  for (auto& t : ts)
    if (t.defined() && t.is_cuda()) return {t.device()};
  return {};
}

class WorkCCL : public c10d::Work {
 public:
  WorkCCL(int rank, OpType type, Tensors outputs)
      : c10d::Work(rank, type), outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                         cuda_devices(outputs_))) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  int sourceRank() const override {
    TORCH_CHECK(source_, "ccl: sourceRank: only a receive from any source has one");
    TORCH_CHECK(*source_ >= 0, "ccl: sourceRank: the receive has not completed");
    return *source_;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // A call ordered on stream s: done is recorded there after it. Set
  // before complete().
  void ordered(std::shared_ptr<c10::Event> done, c10::Stream s) {
    for (auto& w : also_) w->ordered(done, s);
    done_ = std::move(done);
    stream_ = s;
  }

  // wait() returns here; the future (and what is chained on it) completes
  // on the completer's threads. A stream-ordered call's future is marked
  // with the call's stream current, so that it records its events there:
  // waiting on it, or a callback chained on it, orders the waiter's
  // stream after the call.
  void complete(std::exception_ptr error, Completer& completer) {
    for (auto& w : also_) w->complete(error, completer);  // the calls of a coalesced block
    finish(error);  // wakes wait(), sets isCompleted/isSuccess/exception
    auto future = future_;
    Tensors outputs = outputs_;
    c10::optional<c10::Stream> stream = stream_;
    completer.push([future, outputs, error, stream] {
      c10::OptionalStreamGuard on;
      if (stream) on.reset_stream(*stream);
      if (error) future->setError(error);
      else future->markCompleted(c10::IValue(outputs));
    });
  }

  // A stream-ordered call is complete once its stream has run it.
  bool isCompleted() override { return c10d::Work::isCompleted() && (!done_ || done_->query()); }

  // A stream-ordered call: the waiter's current stream (on the call's
  // device) waits for it, the CPU does not (NCCL's Work::wait, which
  // c10d::Work::wait ends with).
  void synchronize() override {
    c10d::Work::synchronize();
    if (done_) done_->block(c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(done_->device()));
  }

  // Issued inside a coalesced block: held until the block's end, and torch
  // waits on it right away where the caller did not ask for async (as it
  // does on NCCL's, whose wait only orders a stream). Until the block is
  // issued, wait() returns at once; the block's own Work is the one to
  // wait on.
  bool wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) override {
    if (held_.load()) return true;
    return c10d::Work::wait(timeout);
  }

  std::atomic<bool> held_{false};
  std::shared_ptr<int> source_;  // a receive from any source: its sender, once done
  std::vector<c10::intrusive_ptr<WorkCCL>> also_;

 private:
  Tensors outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<c10::Event> done_;  // stream-ordered calls: recorded after the call
  c10::optional<c10::Stream> stream_;  // and the stream it is ordered on
};

// Where the workers run. A rank's worker does its communication; pinned to
// the core CCL_BIND=core would give the rank, it is not moved between
// cores mid-call, while the caller's threads (torch's compute) stay
// unpinned. Measured: 4 ranks on 2 cores, all_reduce_perf in place 4 MiB
// 1.33-1.69 ms pinned against 1.72-1.97 unpinned (bench/NOTES.md). The
// first group's worker pins itself through its communicator (the world's,
// where the machine's ranks are numbered); the workers of later groups
// (new_group, split) take the same CPUs, since a sub-group numbers its
// ranks apart. A set CCL_BIND is the user's choice: none pins nothing,
// core pinned the thread that made the communicator, whose workers
// inherit that.
class WorkerPlacement {
 public:
  static void place(ccl_comm_t* comm) {
    if (std::getenv("CCL_BIND")) return;
    static std::mutex mu;
    static bool known = false;
    static cpu_set_t cpus;
    std::lock_guard<std::mutex> g(mu);
    if (known) {
      pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
      return;
    }
    if (ccl_comm_bind_thread(comm) != CCL_OK) return;  // the log says why
    known = pthread_getaffinity_np(pthread_self(), sizeof cpus, &cpus) == 0;
  }
};

class ProcessGroupCCL : public CclBase {
 public:
  ProcessGroupCCL(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, double timeout_s,
                  std::vector<int> global_ranks)
      : CclBase(rank, size), global_ranks_(std::move(global_ranks)) {
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
    timeout_s_ = timeout_s;
    mem_owner_->comm = comm_;
    worker_ = std::thread([this] { run(); });
  }

  // A communicator made from another's (split(), create_group()): no
  // rendezvous through the store.
  ProcessGroupCCL(ccl_comm_t* comm, int rank, int size, double timeout_s, const char* origin,
                  std::vector<int> global_ranks)
      : CclBase(rank, size), comm_(comm), origin_(origin), global_ranks_(std::move(global_ranks)) {
    timeout_s_ = timeout_s;
    mem_owner_->comm = comm_;
    worker_ = std::thread([this] { run(); });
  }

  ~ProcessGroupCCL() override { stop(); }

  const char* origin() const { return origin_; }

  // ccl_comm_describe of the communicator (how it is wired, what ran).
  std::string describe() const {
    char buf[2048] = "";
    if (comm_) (void)ccl_comm_describe(comm_, buf, sizeof buf);
    return buf;
  }

  // Ranks of this group in the default group (where torch said), else in this one.
  std::vector<int> global(const std::vector<int>& ranks) const {
    std::vector<int> out;
    for (int r : ranks) out.push_back(r >= 0 && r < (int)global_ranks_.size() ? global_ranks_[r] : r);
    return out;
  }

  const std::string getBackendName() const override { return "libccl"; }

  c10::intrusive_ptr<c10d::Work> broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    const char* what = "broadcast";
    at::Tensor t = single(tensors, what);
    int root = (int)opts.rootRank;
    return enqueue(OpType::BROADCAST, {t}, [=] {
      return ccl_broadcast(t.data_ptr(), t.data_ptr(), t.numel(), to_ccl(t.scalar_type(), what), root, comm_);
    }, /*groupable=*/true);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    const char* what = "allreduce";
    at::Tensor t = single(tensors, what);
    CclOp op = to_ccl(opts.reduceOp, t.scalar_type(), what);
    ccl_dtype_t dt = to_ccl(t.scalar_type(), what);
    return enqueue(OpType::ALLREDUCE, {t}, [=] {
      return with_op(comm_, op, dt, [&](ccl_op_t o) { return ccl_all_reduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, o, comm_); });
    }, /*groupable=*/true);
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(Tensors& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    const char* what = "allreduce_coalesced";
    TORCH_CHECK(!tensors.empty(), "ccl: ", what, ": no tensors");
    for (auto& t : tensors) {
      check_tensor(t, what);
      TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "ccl: ", what, ": mixed dtypes");
    }
    CclOp op = to_ccl(opts.reduceOp, tensors[0].scalar_type(), what);
    ccl_dtype_t dt = to_ccl(tensors[0].scalar_type(), what);
    Tensors ts = tensors;
    return enqueue(OpType::ALLREDUCE_COALESCED, ts, [=] {
      return with_op(comm_, op, dt, [&](ccl_op_t o) {
        return grouped(ts.size(), [&](size_t i) {  // one call per tensor
          return ccl_all_reduce(ts[i].data_ptr(), ts[i].data_ptr(), ts[i].numel(), dt, o, comm_);
        });
      });
    }, /*groupable=*/true);
  }

  c10::intrusive_ptr<c10d::Work> reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    const char* what = "reduce";
    at::Tensor t = single(tensors, what);
    CclOp op = to_ccl(opts.reduceOp, t.scalar_type(), what);
    ccl_dtype_t dt = to_ccl(t.scalar_type(), what);
    int root = (int)opts.rootRank;
    return enqueue(OpType::REDUCE, {t}, [=] {
      return with_op(comm_, op, dt, [&](ccl_op_t o) { return ccl_reduce(t.data_ptr(), t.data_ptr(), t.numel(), dt, o, root, comm_); });
    }, /*groupable=*/true);
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
      ccl_status_t st = issue(
          [&] { return ccl_all_gather(in.data_ptr(), flat.data_ptr(), in.numel(), to_ccl(in.scalar_type(), what), comm_); });
      if (st == CCL_OK) unflatten(flat, outs);
      return st;
    }, /*groupable=*/false, {in});
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
    }, /*groupable=*/true, {in});
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
    }, /*groupable=*/true, ins);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    const char* what = "reduce_scatter_tensor_coalesced";
    check_pairs(outputs, inputs, what, /*out_scale=*/1, /*in_scale=*/getSize());
    CclOp op = to_ccl(opts.reduceOp, outputs[0].scalar_type(), what);
    for (auto& o : outputs)
      TORCH_CHECK(!op.premul.defined() || o.scalar_type() == outputs[0].scalar_type(), "ccl: ", what,
                  ": PREMUL_SUM over tensors of more than one dtype");
    Tensors outs = outputs, ins = inputs;
    ccl_dtype_t dt0 = to_ccl(outputs[0].scalar_type(), what);
    return enqueue(OpType::COALESCED, outs, [=] {
      return with_op(comm_, op, dt0, [&](ccl_op_t o) {
        return grouped(ins.size(), [&](size_t i) {
          return ccl_reduce_scatter(ins[i].data_ptr(), outs[i].data_ptr(), outs[i].numel(),
                                    to_ccl(outs[i].scalar_type(), what), o, comm_);
        });
      });
    }, /*groupable=*/true, ins);
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
      ccl_status_t st = issue([&] {
        return ccl_gather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, in.numel(),
                          to_ccl(in.scalar_type(), what), root, comm_);
      });
      if (st == CCL_OK) unflatten(flat, outs);
      return st;
    }, /*groupable=*/false, {in});
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
      return issue([&] {
        return ccl_scatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), out.numel(),
                           to_ccl(out.scalar_type(), what), root, comm_);
      });
    }, /*groupable=*/false, ins);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const char* what = "reduce_scatter";
    at::Tensor out = single(outputs, what);
    TORCH_CHECK(inputs.size() == 1 && (int)inputs[0].size() == getSize(), "ccl: ", what, ": needs one list of ",
                getSize(), " input tensors");
    Tensors ins = inputs[0];
    for (auto& i : ins) check_same(out, i, what);
    CclOp op = to_ccl(opts.reduceOp, out.scalar_type(), what);
    ccl_dtype_t dt = to_ccl(out.scalar_type(), what);
    return enqueue(OpType::REDUCE_SCATTER, {out}, [=] {
      at::Tensor flat = flatten(ins);
      return with_op(comm_, op, dt, [&](ccl_op_t o) {
        return issue([&] { return ccl_reduce_scatter(flat.data_ptr(), out.data_ptr(), out.numel(), dt, o, comm_); });
      });
    }, /*groupable=*/false, ins);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    const char* what = "_reduce_scatter_base";
    check_tensor(input, what);
    check_tensor(output, what);
    TORCH_CHECK(input.numel() == output.numel() * getSize() && output.scalar_type() == input.scalar_type(), "ccl: ",
                what, ": the input needs ", getSize(), " x the output's ", output.numel(), " elements of ",
                output.scalar_type());
    CclOp op = to_ccl(opts.reduceOp, output.scalar_type(), what);
    ccl_dtype_t dt = to_ccl(output.scalar_type(), what);
    at::Tensor in = input, out = output;
    return enqueue(OpType::_REDUCE_SCATTER_BASE, {out}, [=] {
      return with_op(comm_, op, dt, [&](ccl_op_t o) {
        return ccl_reduce_scatter(in.data_ptr(), out.data_ptr(), out.numel(), dt, o, comm_);
      });
    }, /*groupable=*/true, {in});
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
      }, /*groupable=*/true, {in});
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
    }, /*groupable=*/true, {in});
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
    }, /*groupable=*/true, ins);
  }

  c10::intrusive_ptr<c10d::Work> send(Tensors& tensors, int dst, int) override {
    const char* what = "send";
    at::Tensor t = single(tensors, what);
    return enqueue(OpType::SEND, {t}, [=] {
      return ccl_send(t.data_ptr(), t.numel(), to_ccl(t.scalar_type(), what), dst, comm_);
    }, /*groupable=*/true, {}, dst);
  }

  c10::intrusive_ptr<c10d::Work> recv(Tensors& tensors, int src, int) override {
    const char* what = "recv";
    at::Tensor t = single(tensors, what);
    return enqueue(OpType::RECV, {t}, [=] {
      return ccl_recv(t.data_ptr(), t.numel(), to_ccl(t.scalar_type(), what), src, comm_);
    }, /*groupable=*/true, {}, src);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(Tensors& tensors, int) override {
    const char* what = "recvAnysource";
    at::Tensor t = single(tensors, what);
    TORCH_CHECK(!coalescing(), "ccl: ", what, ": not inside a coalesced block (its source is known only when it runs)");
    auto source = std::make_shared<int>(-1);
    auto work = enqueue(OpType::RECVANYSOURCE, {t}, [=] {
      return blocking([&] { return ccl_recv_any(t.data_ptr(), t.numel(), to_ccl(t.scalar_type(), what), comm_, source.get()); });
    });
    static_cast<WorkCCL*>(work.get())->source_ = source;
    return work;
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return enqueue(OpType::BARRIER, {}, [=] { return ccl_barrier(comm_); }, /*groupable=*/true);
  }

  // What torch asks of a backend beyond the collectives.

  // torch's split_group (and DeviceMesh on a bound device) makes a
  // sub-group by splitting this communicator: no new rendezvous. ranks are
  // the new group's ranks in this group; a rank outside them takes part
  // (the split is collective) and gets no backend.
#if TORCH_VERSION_MAJOR >= 2
  bool supportsSplitting() const override { return true; }

  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>&, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts) override {
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    auto me = std::find(sorted.begin(), sorted.end(), getRank());
    // Every member derives the same color from the member list; the
    // others pass none.
    uint64_t h = 1469598103934665603ull;
    for (int r : sorted) h = (h ^ (uint64_t)r) * 1099511628211ull;
    int color = me == sorted.end() ? CCL_SPLIT_NOCOLOR : (int)(h & 0x3fffffff);
    int key = me == sorted.end() ? 0 : (int)(me - sorted.begin());
    ccl_comm_t* sub = nullptr;
    ccl_status_t st = run_now([&] { return ccl_comm_split(comm_, color, key, &sub); });
    TORCH_CHECK(st == CCL_OK, "ccl: split: ", ccl_status_string(st), ": ", ccl_comm_last_error(comm_));
    if (!sub) return nullptr;
    double timeout_s = opts ? std::chrono::duration<double>(opts->timeout).count() : 0;
    if (timeout_s > 0 && ccl_comm_set_timeout(sub, timeout_s) != CCL_OK) timeout_s = 0;  // keeps the parent's
    return c10::make_intrusive<ProcessGroupCCL>(sub, key, (int)sorted.size(), timeout_s > 0 ? timeout_s : timeout_s_,
                                                "ccl_comm_split", global(sorted));
  }

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 11)
  // torch's shrink_group: a backend of this group's ranks without
  // ranks_to_exclude, which make no call (ccl_comm_shrink, docs/elastic.md).
  // SHRINK_ABORT (1) revokes this communicator first, so that calls still
  // running on it end at once, on every rank.
  bool supportsShrinking() const override { return true; }

  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& exclude, int flags,
                                           const c10::intrusive_ptr<c10d::Backend::Options>& opts) override {
    std::vector<int> ex(exclude.begin(), exclude.end()), kept;
    for (int r = 0; r < getSize(); r++)
      if (std::find(ex.begin(), ex.end(), r) == ex.end()) kept.push_back(r);
    if (flags & 1) ccl_comm_revoke(comm_);
    ccl_comm_t* sub = nullptr;
    ccl_status_t st = run_now([&] { return ccl_comm_shrink(comm_, ex.data(), (int)ex.size(), &sub); });
    TORCH_CHECK(st == CCL_OK, "ccl: shrink: ", ccl_status_string(st), ": ", ccl_comm_last_error(comm_));
    int rank = 0, size = 0;
    ccl_comm_rank(sub, &rank);
    ccl_comm_size(sub, &size);
    double timeout_s = opts ? std::chrono::duration<double>(opts->timeout).count() : 0;
    if (timeout_s > 0 && ccl_comm_set_timeout(sub, timeout_s) != CCL_OK) timeout_s = 0;  // keeps the parent's
    return c10::make_intrusive<ProcessGroupCCL>(sub, rank, size, timeout_s > 0 ? timeout_s : timeout_s_,
                                                "ccl_comm_shrink", global(kept));
  }
#endif

  // Tensors in memory every rank of the host maps (ccl_mem_alloc), which
  // torch asks for where a caller wants buffers the backend moves fastest
  // (FSDP2's set_allocate_memory_from_process_group: its all-gather and
  // reduce-scatter staging): collectives on them run zero-copy. Allocating
  // is collective, in issue order with the calls; a tensor's deleter only
  // releases its memory (ccl_mem_release, this rank's alone), which a
  // later allocation frees, or reuses, once every rank has released it. A
  // tensor must not outlive its process group: the group's shutdown
  // unmaps what is left.
  bool supportsTensorAlloc(c10::DeviceIndex) override { return true; }

  at::Tensor allocateTensor(long size, at::TensorOptions options) override {
    TORCH_CHECK(!options.has_device() || options.device().is_cpu(),
                "ccl: allocateTensor: shared allocations are host memory; asked for ", options.device());
    TORCH_CHECK(size >= 0, "ccl: allocateTensor: size ", size, " is negative");
    size_t bytes = (size_t)size * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
    void* p = nullptr;
    ccl_status_t st = run_now([&] { return ccl_mem_alloc(comm_, bytes ? bytes : 1, &p); });
    TORCH_CHECK(st == CCL_OK, "ccl: allocateTensor: ", ccl_status_string(st), ": ", ccl_comm_last_error(comm_));
    std::shared_ptr<MemOwner> owner = mem_owner_;
    return at::from_blob(
        p, {size}, [owner](void* q) { owner->release(q); }, options.device(at::kCPU));
  }
#endif

  // new_group (and a DeviceMesh on CPU) creates a sub-group on its members
  // alone, the others make no call: ccl_comm_create_group over this
  // communicator, no rendezvous through the store. ranks are this group's
  // ranks, sorted as torch gives them.
  c10::intrusive_ptr<CclBase> create_group(const std::vector<int>& ranks, double timeout_s) {
    ccl_comm_t* sub = nullptr;
    ccl_status_t st = run_now([&] { return ccl_comm_create_group(comm_, ranks.data(), (int)ranks.size(), &sub); });
    TORCH_CHECK(st == CCL_OK, "ccl: new_group: ", ccl_status_string(st), ": ", ccl_comm_last_error(comm_));
    if (timeout_s > 0 && ccl_comm_set_timeout(sub, timeout_s) != CCL_OK) timeout_s = 0;  // keeps the parent's
    int rank = (int)(std::find(ranks.begin(), ranks.end(), getRank()) - ranks.begin());
    return c10::make_intrusive<ProcessGroupCCL>(sub, rank, (int)ranks.size(), timeout_s > 0 ? timeout_s : timeout_s_,
                                                "ccl_comm_create_group", global(ranks));
  }

#if TORCH_VERSION_MAJOR >= 2
  // Coalesced calls (dist._coalescing_manager, batch_isend_irecv) run as
  // one libccl group: every call between the two is held, then issued
  // together; each call's Work completes with the group's.
  bool supportsCoalescing() const override { return true; }

  void startCoalescing() override {
    std::lock_guard<std::mutex> g(mu_);
    TORCH_CHECK(!coalescing_, "ccl: startCoalescing: already coalescing");
    coalescing_ = true;
  }

  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    std::vector<Task> held;
    {
      std::lock_guard<std::mutex> g(mu_);
      TORCH_CHECK(coalescing_, "ccl: endCoalescing without startCoalescing");
      coalescing_ = false;
      held.swap(held_);
    }
    bool all_groupable = std::all_of(held.begin(), held.end(), [](const Task& t) { return t.groupable; });
    Tensors first;  // the block waits for the caller's stream where its calls are on CUDA
    for (auto& t : held)
      if (t.caller) {
        first = t.work->result();
        break;
      }
    Tensors touched;  // every call's tensors, which a stream-ordered block's stream uses
    for (auto& t : held) touched.insert(touched.end(), t.touched.begin(), t.touched.end());
    auto calls = std::make_shared<std::vector<Task>>(std::move(held));
    auto work = enqueue(OpType::COALESCED, first, [=] {
      // Calls that copy before or after their libccl call (the list
      // forms) cannot wait for a group's end: those run one by one.
      if (!all_groupable) {
        for (auto& t : *calls) {
          ccl_status_t st = t.groupable ? issue(t.call) : t.call();
          if (st != CCL_OK) return st;
        }
        return CCL_OK;
      }
      return grouped(calls->size(), [&](size_t i) { return (*calls)[i].call(); });
    }, /*groupable=*/all_groupable, touched);
    auto* w = static_cast<WorkCCL*>(work.get());
    for (auto& t : *calls) {
      w->also_.push_back(t.work);
      t.work->held_ = false;  // issued now: its wait waits
    }
    return work;
  }

  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override {
    return c10::make_intrusive<c10d::Backend::Options>(
        "libccl", std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(timeout_s_)));
  }

  void setTimeout(std::chrono::milliseconds timeout) override {
    double s = std::chrono::duration<double>(timeout).count();
    ccl_status_t st = run_now([&] { return ccl_comm_set_timeout(comm_, s); });
    TORCH_CHECK(st == CCL_OK, "ccl: setTimeout: ", ccl_status_string(st), ": ", ccl_comm_last_error(comm_));
    timeout_s_ = s;
  }

  // init_process_group(device_id=cuda:N): the communicator is bound to
  // that device's context and every rank's connections are made now (a
  // barrier ordered on the group's stream there), so the first collective
  // pays for neither; ccl.torch.describe() then names the device. Fails,
  // saying why, where the communicator is bound to another device.
  void eagerConnectSingleDevice(at::Device device) override {
    if (!device.is_cuda() || c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).deviceCount() == 0) return;
    ccl_status_t st = run_now([&] {
      c10::Stream s = ordering_stream(device);
      ccl_status_t r;
      {
        OrderedOn on(s);
        r = issue([&] { return ccl_barrier(comm_); });
      }
      s.synchronize();
      return r;
    });
    TORCH_CHECK(st == CCL_OK, "ccl: eager init on ", device, ": ", ccl_status_string(st), ": ",
                ccl_comm_last_error(comm_));
  }

  c10d::ErrorType getError() override {
    ccl_status_t err = CCL_OK;
    if (!comm_ || ccl_comm_get_async_error(comm_, &err) != CCL_OK) return c10d::ErrorType::COMM_ERROR;
    switch (err) {
      case CCL_OK: return c10d::ErrorType::SUCCESS;
      case CCL_ERR_TIMEOUT: return c10d::ErrorType::TIMEOUT;
      case CCL_ERR_REMOTE: return c10d::ErrorType::REMOTE_ERROR;
      default: return c10d::ErrorType::COMM_ERROR;
    }
  }

  // Every queued and running call fails at once (CCL_ERR_ABORTED), and
  // the other ranks are told.
  void abort() override {
    if (comm_) (void)ccl_comm_abort(comm_);
  }

  // The queued calls finish, then the communicator goes.
  void shutdown() override { stop(); }

  void setSequenceNumberForGroup() override {}  // every rank starts at 0
  uint64_t getSequenceNumberForGroup() override {
    std::lock_guard<std::mutex> g(mu_);
    return seq_;
  }
#endif

  // Rank 0 hears from every rank within the timeout, or names each one it
  // did not hear from (wait_all_ranks) or the first; then lets them go.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    auto timeout = opts.timeout.count() > 0 ? std::chrono::duration<double>(opts.timeout).count() : timeout_s_;
    int n = getSize(), me = getRank();
    std::string missing;
    ccl_status_t st = run_now([&] {
      uint8_t token = 1;
      if (me != 0) {
        ccl_status_t s = ccl_send(&token, 1, CCL_UINT8, 0, comm_);
        return s != CCL_OK ? s : ccl_recv(&token, 1, CCL_UINT8, 0, comm_);
      }
      // One receive from any source at a time: whichever rank arrives
      // next is taken, so a missing rank holds up no one behind it.
      auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
      std::vector<bool> seen((size_t)n, false);
      for (int left = n - 1; left > 0; left--) {
        int src = -1;
        uint8_t got = 0;
        ccl_request_t* req = nullptr;
        ccl_status_t s = ccl_recv_any_async(&got, 1, CCL_UINT8, comm_, &src, &req);
        if (s != CCL_OK) return s;
        int done = 0;
        while ((s = ccl_test(req, &done)) == CCL_INPROGRESS && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        // Out of time here, or in libccl's own wait (the group's timeout).
        if (s == CCL_INPROGRESS || s == CCL_ERR_TIMEOUT) {
          for (int r = 1; r < n; r++)
            if (!seen[(size_t)r] && (wait_all_ranks || missing.empty()))
              missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          // A receive cannot be taken back: the communicator ends here.
          (void)ccl_comm_abort(comm_);
          if (s == CCL_INPROGRESS) (void)ccl_wait(req);
          return CCL_ERR_TIMEOUT;
        }
        (void)ccl_wait(req);
        if (s != CCL_OK) return s;
        seen[(size_t)src] = true;
      }
      for (int r = 1; r < n; r++) {
        ccl_status_t s = ccl_send(&token, 1, CCL_UINT8, r, comm_);
        if (s != CCL_OK) return s;
      }
      return CCL_OK;
    });
    TORCH_CHECK(missing.empty(), "ccl: monitoredBarrier: rank", missing.find(',') == std::string::npos ? " " : "s ",
                missing, " did not reach the barrier within ", timeout, " s (the process group is aborted)");
    TORCH_CHECK(st == CCL_OK, "ccl: monitoredBarrier: ", ccl_status_string(st), ": ", ccl_comm_last_error(comm_));
  }

 private:
  // torch's names for the calls, as its analyzer knows them.
  static const char* flight_name(OpType t) {
    switch (t) {
      case OpType::BROADCAST: return "broadcast";
      case OpType::ALLREDUCE: return "all_reduce";
      case OpType::ALLREDUCE_COALESCED: return "allreduce_coalesced";
      case OpType::REDUCE: return "reduce";
      case OpType::ALLGATHER: return "all_gather";
      case OpType::_ALLGATHER_BASE: return "_all_gather_base";
      case OpType::GATHER: return "gather";
      case OpType::SCATTER: return "scatter";
      case OpType::REDUCE_SCATTER: return "reduce_scatter";
      case OpType::_REDUCE_SCATTER_BASE: return "_reduce_scatter_base";
      case OpType::ALLTOALL_BASE:
      case OpType::ALLTOALL: return "all_to_all";
      case OpType::SEND: return "send";
      case OpType::RECV:
      case OpType::RECVANYSOURCE: return "recv";
      case OpType::BARRIER: return "all_reduce_barrier";
      default: return "coalesced";
    }
  }

  ccl_flight::Call flight_call(OpType type, const Tensors& outputs, const Tensors& inputs, int peer) {
    ccl_flight::Call c;
    c.pg_id = pg_id_;
#if TORCH_VERSION_MAJOR >= 2
    c.pg_name = getGroupUid();
    c.pg_desc = getGroupDesc();
#endif
    if (c.pg_name.empty()) c.pg_name = std::to_string(pg_id_);
    if (c.pg_desc.empty()) c.pg_desc = "undefined";
    c.name = flight_name(type);
    c.p2p = type == OpType::SEND || type == OpType::RECV || type == OpType::RECVANYSOURCE;
    if (type == OpType::SEND) c.name += " " + std::to_string(getRank()) + "->" + std::to_string(peer);
    if (type == OpType::RECV) c.name += " " + std::to_string(getRank()) + "<-" + std::to_string(peer);
    if (type == OpType::RECVANYSOURCE) c.name += " " + std::to_string(getRank()) + "<--1";
    c.outputs = outputs;
    c.inputs = inputs.empty() ? outputs : inputs;
    c.timeout_ms = (int64_t)(timeout_s_ * 1000);
    if (!flight_group_told_.exchange(true)) {
      std::vector<int> all(getSize());
      for (int r = 0; r < getSize(); r++) all[r] = r;
      ccl_flight::Recorder::get().group(c.pg_name, c.pg_desc, global(all));
    }
    return c;
  }

  struct Task {
    c10::intrusive_ptr<WorkCCL> work;
    std::function<ccl_status_t()> call;
    bool groupable = false;  // nothing but libccl calls: it may run inside a libccl group
    c10::optional<c10::Stream> caller;  // CUDA tensors: the caller's current stream then
    int64_t flight = -1;                 // its flight-recorder entry (none: -1)
    // Stream-ordered calls: recorded on the caller's stream at the call
    // (what the call waits for), and the tensors the call's stream uses.
    std::shared_ptr<c10::Event> ready;
    Tensors touched;
  };

  // The caller's current stream where the call's tensors are CUDA ones.
  static c10::optional<c10::Stream> caller_stream(const Tensors& ts) {
    for (auto& t : ts)
      if (t.defined() && t.is_cuda()) return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(t.device());
    return c10::nullopt;
  }

  // The group's stream on a device, which its stream-ordered calls go on
  // (one of torch's pooled streams, as the NCCL backend takes). Worker only.
  c10::Stream ordering_stream(c10::Device device) {
    auto it = streams_.find(device.index());
    if (it == streams_.end())
      it = streams_.emplace(device.index(),
                            c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStreamFromGlobalPool(device))
               .first;
    return it->second;
  }

  bool coalescing() {
    std::lock_guard<std::mutex> g(mu_);
    return coalescing_;
  }

  // inputs: where they are not the outputs (in-place calls leave them
  // empty); peer: a send's or receive's. Both for the flight recorder.
  c10::intrusive_ptr<c10d::Work> enqueue(OpType type, Tensors outputs, std::function<ccl_status_t()> call,
                                         bool groupable = false, Tensors inputs = {}, int peer = -1) {
    auto caller = caller_stream(outputs);
    if (!caller) caller = caller_stream(inputs);  // a gather's non-root has only an input
    std::shared_ptr<c10::Event> ready;
    Tensors touched;
    if (caller && kStreamOrdered) {
      ready = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
      ready->record(*caller);
      touched = outputs;
      touched.insert(touched.end(), inputs.begin(), inputs.end());
    }
    ccl_flight::Call rec;
    if (ccl_flight::Recorder::get().enabled()) rec = flight_call(type, outputs, inputs, peer);
    auto work = c10::make_intrusive<WorkCCL>(getRank(), type, std::move(outputs));
    {
      std::lock_guard<std::mutex> g(mu_);
      TORCH_CHECK(!stop_, "ccl: the process group was shut down");
      seq_++;
      if (coalescing_) {  // the block is recorded as one call, as torch's NCCL backend records it
        work->held_ = true;
        held_.push_back(Task{work, std::move(call), groupable, caller, -1, nullptr, std::move(touched)});
        return work;  // completes with endCoalescing's
      }
      int64_t flight = ccl_flight::Recorder::get().enabled() ? ccl_flight::Recorder::get().issued(rec) : -1;
      queue_.push_back(Task{work, std::move(call), groupable, caller, flight, std::move(ready), std::move(touched)});
    }
    cv_.notify_one();
    return work;
  }

  // fn on the worker, after everything queued before it, waited for here
  // (without the GIL, where the caller holds it).
  ccl_status_t run_now(const std::function<ccl_status_t()>& fn) {
    auto work = c10::make_intrusive<WorkCCL>(getRank(), OpType::UNKNOWN, Tensors{});
    ccl_status_t st = CCL_OK;
    {
      std::lock_guard<std::mutex> g(mu_);
      TORCH_CHECK(!stop_, "ccl: the process group was shut down");
      queue_.push_back(Task{work, [&] { st = fn(); return CCL_OK; }});
    }
    cv_.notify_one();
    if (PyGILState_Check()) {
      pybind11::gil_scoped_release nogil;
      work->wait();
    } else {
      work->wait();
    }
    return st;
  }

  static std::atomic<size_t>& next_pg_id() {
    static std::atomic<size_t> n{0};
    return n;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();  // queued operations finish first
    mem_owner_->forget();  // tensors that outlive the group release nothing
    if (comm_) ccl_comm_destroy(comm_);
    comm_ = nullptr;
  }

  void run() {
    WorkerPlacement::place(comm_);
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
        c10::OptionalDeviceGuard device;
        c10::optional<c10::Stream> ordering;
        c10::optional<OrderedOn> on;
        if (task.caller) {
          device.reset_device(task.caller->device());  // libccl binds the device current now
          if (task.ready) {  // stream-ordered: after the caller's stream as it was at the call
            ordering = ordering_stream(task.caller->device());
            task.ready->block(*ordering);
            c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
            for (auto& t : task.touched)  // freed by the caller, not reused before the call ran
              if (t.defined() && t.is_cuda()) impl.recordDataPtrOnStream(t.storage().data_ptr(), *ordering);
            on.emplace(*ordering);
          } else {
            task.caller->synchronize();
          }
        }
        ccl_flight::Recorder::get().started(task.flight);
        ccl_status_t st = task.groupable ? issue(task.call) : task.call();
        if (st != CCL_OK)
          throw std::runtime_error(std::string("ccl: ") + ccl_status_string(st) + ": " + ccl_comm_last_error(comm_));
        if (ordering) {
          auto done = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
          done->record(*ordering);
          task.work->ordered(std::move(done), *ordering);
        }
      } catch (...) {
        error = std::current_exception();
      }
      if (task.flight >= 0) {
        ccl_flight::Recorder::get().ended(task.flight, !error);
        if (error) ccl_flight::Recorder::get().dump_on_failure(global({getRank()})[0]);
      }
      task.work->complete(error, completer_);
    }
  }

  ccl_comm_t* comm_ = nullptr;
  // The communicator as allocated tensors' deleters see it: gone once the
  // group stops.
  struct MemOwner {
    std::mutex mu;
    ccl_comm_t* comm;
    void release(void* p) {
      std::lock_guard<std::mutex> g(mu);
      if (comm) (void)ccl_mem_release(comm, p);
    }
    void forget() {
      std::lock_guard<std::mutex> g(mu);
      comm = nullptr;
    }
  };
  std::shared_ptr<MemOwner> mem_owner_ = std::make_shared<MemOwner>();
  const char* origin_ = "store";  // how the communicator was made (origin(), for tests)
  std::vector<int> global_ranks_;  // this group's ranks in the default group (empty: unknown)
  size_t pg_id_ = next_pg_id()++;  // the flight recorder's number for it, in creation order
  std::atomic<bool> flight_group_told_{false};
  double timeout_s_ = 0;
  Completer completer_;  // declared before the worker: it outlives the worker's last completion
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  std::vector<Task> held_;  // calls of a coalesced block, until its end
  std::unordered_map<c10::DeviceIndex, c10::Stream> streams_;  // ordering_stream's, by device (worker only)
  bool coalescing_ = false;
  bool stop_ = false;
  uint64_t seq_ = 0;  // calls issued: the same on every rank
};

c10::intrusive_ptr<CclBase> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                   const std::chrono::duration<float>& timeout, std::vector<int> global_ranks) {
  if (global_ranks.empty())  // the default group
    for (int r = 0; r < size; r++) global_ranks.push_back(r);
  return c10::make_intrusive<ProcessGroupCCL>(store, rank, size, (double)timeout.count(), std::move(global_ranks));
}

pybind11::bytes flight_recorder_dump() { return pybind11::bytes(ccl_flight::Recorder::get().dump()); }

// A group of the parent's ranks, made on the parent's communicator; None
// where the parent is not this backend (torch's debug wrapper, another
// backend), and the caller then makes it through the store.
c10::optional<c10::intrusive_ptr<CclBase>> create_group(const c10::intrusive_ptr<CclBase>& parent,
                                                        const std::vector<int>& ranks,
                                                        const std::chrono::duration<float>& timeout) {
  auto* p = dynamic_cast<ProcessGroupCCL*>(parent.get());
  if (!p) return c10::nullopt;
  return p->create_group(ranks, (double)timeout.count());
}

// How a ccl process group's communicator was made: "store" (a
// rendezvous), "ccl_comm_split" or "ccl_comm_create_group"; None for
// another backend.
c10::optional<std::string> origin(const c10::intrusive_ptr<CclBase>& pg) {
  auto* p = dynamic_cast<ProcessGroupCCL*>(pg.get());
  if (!p) return c10::nullopt;
  return std::string(p->origin());
}

// ccl_comm_describe of a ccl process group's communicator; None for
// another backend.
c10::optional<std::string> describe(const c10::intrusive_ptr<CclBase>& pg) {
  auto* p = dynamic_cast<ProcessGroupCCL*>(pg.get());
  if (!p) return c10::nullopt;
  return p->describe();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "libccl as a torch.distributed process group";
  m.def("create_process_group", &create, "store, rank, world size, timeout -> a ccl process group",
        pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
        pybind11::arg("global_ranks") = std::vector<int>{});
  m.def("flight_recorder_dump", &flight_recorder_dump,
        "the flight recorder of this process's ccl process groups, pickled as torch's recorder pickles its own");
  m.def("create_group", &create_group,
        "parent process group, its ranks in the new group, timeout -> a ccl process group made on the parent's "
        "communicator by the members alone, or None where the parent is not a ccl process group",
        pybind11::arg("parent"), pybind11::arg("ranks"), pybind11::arg("timeout"));
  m.def("origin", &origin, "how a ccl process group's communicator was made", pybind11::arg("pg"));
  m.def("describe", &describe, "ccl_comm_describe of a ccl process group's communicator", pybind11::arg("pg"));
  // The backend's own Python type, so that what torch asks of a backend
  // it can split (beyond the Backend interface) is there: with a bound
  // device (init_process_group(device_id=...)), new_group has each
  // non-member call perform_nocolor_split on the parent, as
  // ncclCommSplit needs; ccl_comm_create_group needs nothing of them.
  pybind11::class_<ProcessGroupCCL, CclBase, c10::intrusive_ptr<ProcessGroupCCL>>(m, "ProcessGroupCCL")
      .def("perform_nocolor_split", [](ProcessGroupCCL&, const pybind11::object&) {},
           "a non-member's part in making a group: nothing (the members make it alone)", pybind11::arg("device"));
}
