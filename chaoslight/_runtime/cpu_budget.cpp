// chaoslight's memory budget on the CPU, counted where the bytes are handed out.
//
// A CPU allocator that stands in front of torch's own (c10::SetCPUAllocator) and counts,
// against a limit, the allocations of at least `min_bytes` that the threads chaoslight
// names make. An allocation that would go over is refused with torch's own OOM
// (c10::OutOfMemoryError, torch.OutOfMemoryError in Python), whose message the Python side
// writes (the rank, the step, the program's line). Everything else passes straight to the
// allocator it replaced: no Python, no lock, a thread-local test and two relaxed loads.
//
// Built on first use against the installed torch's headers and loaded with ctypes
// (chaoslight/_runtime/_cpu_budget.py): plain C functions, so no pybind11 and no torch
// extension machinery, and a build takes about a second.
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace {

// Writes the refusal's message into `buffer` (at most `capacity` bytes); returns its length.
using Refusal = int64_t (*)(int64_t nbytes, int64_t used, int64_t limit, char* buffer,
                            int64_t capacity);

struct Counted {
  int64_t nbytes;
  c10::DeleterFnPtr deleter;  // the replaced allocator's own
  int64_t generation;         // the budget it was counted under
};

// A thread counts while it is named (count_this_thread) and not inside chaoslight's own
// calls (pause/resume nest).
thread_local bool named = false;
thread_local int paused = 0;

std::atomic<bool> active{false};
std::atomic<int64_t> used{0};
std::atomic<int64_t> extra{0};  // what the ledger counts besides: Allocate holds
std::atomic<int64_t> limit{INT64_MAX};
std::atomic<int64_t> min_bytes{0};
std::atomic<int64_t> generation{0};
std::atomic<Refusal> refusal{nullptr};

std::mutex counted_mutex;
std::unordered_map<void*, Counted>* counted = new std::unordered_map<void*, Counted>();

// A fork while another thread holds the table's lock would leave it held in the child for
// good (a DataLoader worker freeing a tensor it inherited): hold it across the fork.
void before_fork() { counted_mutex.lock(); }
void after_fork() { counted_mutex.unlock(); }

void counted_delete(void* ptr) {
  Counted entry{0, nullptr, -1};
  {
    std::lock_guard<std::mutex> guard(counted_mutex);
    auto found = counted->find(ptr);
    if (found != counted->end()) {
      entry = found->second;
      counted->erase(found);
    }
  }
  if (entry.generation == generation.load()) {
    used.fetch_sub(entry.nbytes);
  }
  if (entry.deleter != nullptr) {
    entry.deleter(ptr);
  }
}

[[noreturn]] void refuse(int64_t nbytes, int64_t now, int64_t cap) {
  std::string message(4096, '\0');
  Refusal write = refusal.load();
  int64_t length = write == nullptr ? 0 : write(nbytes, now, cap, &message[0], 4096);
  if (length <= 0 || length > 4096) {
    message = "CUDA out of memory. Tried to allocate " + std::to_string(nbytes) +
              " bytes [chaoslight's CPU memory budget: " + std::to_string(now) + " of " +
              std::to_string(cap) + " bytes used]";
  } else {
    message.resize(static_cast<size_t>(length));
  }
  C10_THROW_ERROR(OutOfMemoryError, message);
}

struct CountingAllocator final : c10::Allocator {
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    const auto nbytes = static_cast<int64_t>(n);
    if (!named || paused != 0 || !active.load(std::memory_order_relaxed) ||
        nbytes < min_bytes.load(std::memory_order_relaxed)) {
      return base_->allocate(n);
    }
    const int64_t now = used.load() + extra.load();
    const int64_t cap = limit.load();
    if (nbytes > cap - now) {
      refuse(nbytes, now, cap);
    }
    c10::DataPtr data = base_->allocate(n);
    if (data.get() == nullptr || data.get() != data.get_context()) {
      return data;  // nothing, or a context this allocator cannot stand in for: not counted
    }
    c10::DeleterFnPtr deleter = data.get_deleter();
    void* ptr = data.release_context();
    const int64_t current = generation.load();
    {
      std::lock_guard<std::mutex> guard(counted_mutex);
      (*counted)[ptr] = Counted{nbytes, deleter, current};
    }
    used.fetch_add(nbytes);
    return {ptr, ptr, &counted_delete, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  c10::Allocator* base_;
};

CountingAllocator* counting = nullptr;

}  // namespace

extern "C" {

// Stand in front of the CPU allocator torch uses now; 1 when torch then uses this one.
int chaoslight_install() {
  if (counting == nullptr) {
    pthread_atfork(before_fork, after_fork, after_fork);
    counting = new CountingAllocator(c10::GetCPUAllocator());
  }
  if (c10::GetCPUAllocator() != counting) {
    c10::SetCPUAllocator(counting, 0);
  }
  return c10::GetCPUAllocator() == counting ? 1 : 0;
}

// Give the CPU back to the allocator replaced, unless another took over since (theirs stays).
void chaoslight_uninstall() {
  if (counting != nullptr && c10::GetCPUAllocator() == counting) {
    c10::SetCPUAllocator(counting->base_, 0);
  }
}

// Count from zero against `new_limit`: what an earlier budget counted is not this one's.
void chaoslight_start(int64_t new_limit, int64_t new_min_bytes, Refusal on_refusal) {
  generation.fetch_add(1);
  used.store(0);
  extra.store(0);
  limit.store(new_limit);
  min_bytes.store(new_min_bytes);
  refusal.store(on_refusal);
  active.store(true);
}

void chaoslight_stop() {
  active.store(false);
  refusal.store(nullptr);
}

// 1 while torch's CPU allocator is this one.
int chaoslight_installed() { return counting != nullptr && c10::GetCPUAllocator() == counting; }

void chaoslight_count_this_thread(int on) { named = on != 0; }
void chaoslight_pause() { ++paused; }
void chaoslight_resume() { --paused; }
void chaoslight_set_extra(int64_t nbytes) { extra.store(nbytes); }
int64_t chaoslight_used() { return used.load(); }

}  // extern "C"
