// The torch backend's flight recorder: the last calls of every libccl
// process group of this process, in the format of torch's own recorder
// (the dump torch's NCCL backend writes, version 2.10), so that torch's
// analyzer reads it (python -m ccl.fr_trace). Included by
// torch_backend.cpp alone.
//
// Size: TORCH_FR_BUFFER_SIZE (or TORCH_NCCL_TRACE_BUFFER_SIZE), torch's
// variables, 2000 calls by default, 0 off. A dump: on demand
// (ccl.torch.flight_recorder_dump()), and once per process on the first
// call that fails, to TORCH_FR_DUMP_TEMP_FILE (or
// TORCH_NCCL_DEBUG_INFO_TEMP_FILE) followed by the rank in the default
// group, where that variable is set.
#pragma once

#include <torch/csrc/jit/serialization/pickle.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>

namespace ccl_flight {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline const char* env_first(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const char* v = std::getenv(n);
    if (v && *v) return v;
  }
  return nullptr;
}

// What a process group tells the recorder about one call when it is issued.
struct Call {
  size_t pg_id = 0;
  std::string pg_name, pg_desc;
  std::string name;  // torch's name for it ("all_reduce", "send 0->1")
  bool p2p = false;
  std::vector<at::Tensor> inputs, outputs;
  int64_t timeout_ms = 0;
};

class Recorder {
 public:
  static Recorder& get() {
    static Recorder* r = new Recorder();  // never freed: process groups may outlive static destruction
    return *r;
  }

  bool enabled() const { return capacity_ > 0; }

  // A group's members (ranks in the default group), for the dump's pg_config.
  void group(const std::string& name, const std::string& desc, const std::vector<int>& ranks) {
    if (!enabled()) return;
    std::lock_guard<std::mutex> g(mu_);
    groups_[name] = Group{desc, ranks};
  }

  // The record's id, or -1 where recording is off.
  int64_t issued(const Call& c) {
    if (!enabled()) return -1;
    Entry e;
    e.pg_id = c.pg_id;
    e.pg_name = c.pg_name;
    e.pg_desc = c.pg_desc;
    e.name = "libccl:" + c.name;
    e.p2p = c.p2p;
    e.timeout_ms = c.timeout_ms;
    e.created_ns = now_ns();
    for (auto& t : c.inputs) {
      e.in_sizes.push_back(t.sizes().vec());
      e.in_dtypes.push_back(c10::toString(t.scalar_type()));
    }
    for (auto& t : c.outputs) {
      e.out_sizes.push_back(t.sizes().vec());
      e.out_dtypes.push_back(c10::toString(t.scalar_type()));
    }
    char tname[32] = "";
    pthread_getname_np(pthread_self(), tname, sizeof tname);
    e.thread_name = tname;
    e.thread_id = std::to_string((unsigned long)pthread_self());  // what std::thread::id prints on Linux
    std::lock_guard<std::mutex> g(mu_);
    Status& s = status_[c.pg_id];
    if (c.p2p) e.p2p_seq = ++s.p2p_seq;
    else e.coll_seq = s.last_enqueued = ++s.coll_seq;
    e.op_id = ++s.op_id;
    size_t id = e.id = next_id_++;
    if (ring_.size() < capacity_) ring_.push_back(std::move(e));  // ids so far: their index
    else ring_[id % capacity_] = std::move(e);
    return (int64_t)id;
  }

  void started(int64_t id) {
    std::lock_guard<std::mutex> g(mu_);
    Entry* e = find(id);
    if (!e) return;
    e->started_ns = now_ns();
    if (!e->p2p) status_[e->pg_id].last_started = e->coll_seq;
  }

  void ended(int64_t id, bool ok) {
    std::lock_guard<std::mutex> g(mu_);
    Entry* e = find(id);
    if (!e) return;
    e->retired = true;
    if (!ok) return;  // a failed call stays "started": it never completed
    e->completed_ns = now_ns();
    if (!e->p2p) status_[e->pg_id].last_completed = e->coll_seq;
  }

  // torch's dump: a pickled dict of version, comm_lib_version, pg_config,
  // pg_status and entries.
  std::string dump() {
    std::lock_guard<std::mutex> g(mu_);
    auto dict = new_dict();
    dict.insert("version", "2.10");
    int ver = ccl_version();
    dict.insert("comm_lib_version", "libccl " + std::to_string(ver / 10000) + "." + std::to_string(ver / 100 % 100) +
                                        "." + std::to_string(ver % 100));
    auto config = new_dict();
    for (auto& kv : groups_) {
      auto pg = new_dict();
      pg.insert("name", kv.first);
      pg.insert("desc", kv.second.desc);
      std::string r = "[";
      for (size_t i = 0; i < kv.second.ranks.size(); i++) r += (i ? ", " : "") + std::to_string(kv.second.ranks[i]);
      pg.insert("ranks", r + "]");
      config.insert(kv.first, pg);
    }
    dict.insert("pg_config", config);
    auto status = new_dict();
    for (auto& kv : status_) {
      auto s = new_dict();
      s.insert("last_enqueued_collective", kv.second.last_enqueued);
      s.insert("last_started_collective", kv.second.last_started);
      s.insert("last_completed_collective", kv.second.last_completed);
      status.insert(std::to_string(kv.first), s);
    }
    dict.insert("pg_status", status);
    c10::List<c10::IValue> entries(c10::AnyType::get());
    size_t n = ring_.size(), first = next_id_ > capacity_ ? (size_t)next_id_ % capacity_ : 0;
    for (size_t k = 0; k < n; k++) entries.push_back(to_dict(ring_[(first + k) % n]));
    dict.insert("entries", entries);
    std::vector<char> bytes = torch::jit::pickle(c10::IValue(dict));
    return std::string(bytes.begin(), bytes.end());
  }

  // The first failure of this process writes the dump, where a file was
  // asked for; later ones leave it as it is.
  void dump_on_failure(int global_rank) {
    if (!enabled()) return;
    const char* prefix = env_first({"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"});
    if (!prefix) return;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (dumped_) return;
      dumped_ = true;
    }
    std::string path = std::string(prefix) + std::to_string(global_rank), tmp = path + ".tmp";
    std::string bytes = dump();
    FILE* f = std::fopen(tmp.c_str(), "wb");
    bool ok = f && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (f && std::fclose(f) != 0) ok = false;
    if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) {
      std::fprintf(stderr, "ccl.torch: flight recorder written to %s (%zu bytes)\n", path.c_str(), bytes.size());
    } else {
      std::remove(tmp.c_str());
      std::fprintf(stderr, "ccl.torch: cannot write the flight recorder to %s\n", path.c_str());
    }
  }

 private:
  struct Entry {
    size_t id = 0, pg_id = 0;
    std::string pg_name, pg_desc, name, thread_name, thread_id;
    int64_t coll_seq = 0, p2p_seq = 0, op_id = 0, created_ns = 0, started_ns = -1, completed_ns = -1,
            timeout_ms = 0;
    std::vector<std::vector<int64_t>> in_sizes, out_sizes;
    std::vector<std::string> in_dtypes, out_dtypes;
    bool p2p = false, retired = false;
  };
  struct Group {
    std::string desc;
    std::vector<int> ranks;
  };
  struct Status {
    int64_t coll_seq = 0, p2p_seq = 0, op_id = 0, last_enqueued = -1, last_started = -1, last_completed = -1;
  };

  Recorder() {
    const char* v = env_first({"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"});
    long n = v ? std::strtol(v, nullptr, 10) : 2000;
    capacity_ = n > 0 ? (size_t)n : 0;
  }

  static c10::Dict<c10::IValue, c10::IValue> new_dict() {
    return c10::Dict<c10::IValue, c10::IValue>(c10::AnyType::get(), c10::AnyType::get());
  }

  static c10::List<c10::IValue> sizes(const std::vector<std::vector<int64_t>>& all) {
    c10::List<c10::IValue> out(c10::AnyType::get());
    for (auto& s : all) out.push_back(c10::List<int64_t>(s));
    return out;
  }

  static c10::List<c10::IValue> strings(const std::vector<std::string>& all) {
    c10::List<c10::IValue> out(c10::AnyType::get());
    for (auto& s : all) out.push_back(s);
    return out;
  }

  static c10::IValue when(int64_t ns) { return ns < 0 ? c10::IValue() : c10::IValue(ns); }

  static c10::Dict<c10::IValue, c10::IValue> to_dict(const Entry& e) {
    auto d = new_dict();
    d.insert("record_id", (int64_t)e.id);
    d.insert("pg_id", (int64_t)e.pg_id);
    d.insert("process_group", c10::ivalue::Tuple::create(e.pg_name, e.pg_desc));
    d.insert("thread_name", e.thread_name);
    d.insert("thread_id", e.thread_id);
    d.insert("collective_seq_id", e.coll_seq);
    d.insert("p2p_seq_id", e.p2p_seq);
    d.insert("op_id", e.op_id);
    d.insert("profiling_name", e.name);
    d.insert("time_created_ns", e.created_ns);
    if (e.started_ns >= 0 && e.completed_ns >= 0) d.insert("duration_ms", (double)(e.completed_ns - e.started_ns) / 1e6);
    d.insert("input_sizes", sizes(e.in_sizes));
    d.insert("input_dtypes", strings(e.in_dtypes));
    d.insert("output_sizes", sizes(e.out_sizes));
    d.insert("output_dtypes", strings(e.out_dtypes));
    d.insert("state", e.completed_ns >= 0 ? "completed" : e.started_ns >= 0 ? "started" : "scheduled");
    d.insert("time_discovered_started_ns", when(e.started_ns));
    d.insert("time_discovered_completed_ns", when(e.completed_ns));
    d.insert("retired", e.retired);
    d.insert("timeout_ms", e.timeout_ms);
    d.insert("is_p2p", e.p2p);
    d.insert("frames", c10::List<c10::IValue>(c10::AnyType::get()));
    return d;
  }

  Entry* find(int64_t id) {
    size_t at = (size_t)id % (capacity_ ? capacity_ : 1);
    if (id < 0 || at >= ring_.size()) return nullptr;
    Entry& e = ring_[at];
    return e.id == (size_t)id ? &e : nullptr;
  }

  std::mutex mu_;
  size_t capacity_ = 0;
  size_t next_id_ = 0;
  std::vector<Entry> ring_;  // entry id i at i % capacity_
  std::map<std::string, Group> groups_;
  std::map<size_t, Status> status_;
  bool dumped_ = false;
};

}  // namespace ccl_flight
