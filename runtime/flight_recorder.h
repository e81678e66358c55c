// The flight recorder: every rank's last operations, for the hang diagnosis (docs/design.md
// "Flight recorder and diagnosis").
//
// A fixed ring of `capacity` records, indexed by handle: handles are positive and never reused
// (runtime/handle_table.h), so the record of handle h lives in slot h % capacity until handle
// h + capacity takes it over. No map, no allocation after construction: an operation costs
// three uncontended slot locks (enqueue, start, end) and a copy of at most kNameBytes of its
// name. Memory: capacity * sizeof(Slot) (about 150 bytes each), fixed at construction.
//
// Thread safety: every method may be called from any thread. Writers of different handles
// touch different slots (or, after a wrap, wait for one slot's lock); Snapshot copies each
// slot under its lock, so a record it returns is never torn.
#ifndef HORA_RUNTIME_FLIGHT_RECORDER_H_
#define HORA_RUNTIME_FLIGHT_RECORDER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/types.h"

namespace hora {

enum class FlightState : uint8_t {
  kPending,  // enqueued, not yet started (waiting for the other ranks)
  kRunning,  // negotiated: its bucket is running on the data plane
  kDone,
  kFailed,
};
const char* FlightStateName(FlightState s);

// One operation as a reader sees it. Times are steady-clock microseconds (TimelineNowUs);
// 0 = not (yet) happened, or not recorded on that path (the steady path has no start).
struct FlightRecord {
  int64_t handle = 0;
  std::string name;  // at most kNameBytes of it
  int32_t process_set = 0;
  CollectiveType kind = CollectiveType::kAllreduce;
  int64_t bytes = 0;
  int64_t enqueue_us = 0;
  int64_t start_us = 0;
  int64_t end_us = 0;
  FlightState state = FlightState::kPending;
};

class FlightRecorder {
 public:
  static constexpr size_t kNameBytes = 63;
  // capacity 0 turns recording off (every call returns at once).
  explicit FlightRecorder(size_t capacity);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  size_t capacity() const { return capacity_; }
  // The clock of the records: steady-clock microseconds (the timeline's, TimelineNowUs).
  static int64_t NowUs() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // REQUIRES: handle > 0. Starts the record of `handle` (replacing the slot's older one).
  void Enqueued(int64_t handle, const TensorSpec& spec, int64_t now_us);
  // Change the record of `handle`; ignored when the slot holds another handle by now.
  void Started(int64_t handle, int64_t now_us);
  void Ended(int64_t handle, bool ok, int64_t now_us);

  // Every record the ring holds, oldest handle first.
  std::vector<FlightRecord> Snapshot() const;

 private:
  struct Slot {
    mutable Mutex mu;
    int64_t handle GUARDED_BY(mu) = 0;  // 0 = empty
    char name[kNameBytes + 1] GUARDED_BY(mu) = {};
    int32_t process_set GUARDED_BY(mu) = 0;
    CollectiveType kind GUARDED_BY(mu) = CollectiveType::kAllreduce;
    int64_t bytes GUARDED_BY(mu) = 0;
    int64_t enqueue_us GUARDED_BY(mu) = 0;
    int64_t start_us GUARDED_BY(mu) = 0;
    int64_t end_us GUARDED_BY(mu) = 0;
    FlightState state GUARDED_BY(mu) = FlightState::kPending;
  };
  Slot& SlotOf(int64_t handle) const { return slots_[static_cast<size_t>(handle) % capacity_]; }

  const size_t capacity_;
  const std::unique_ptr<Slot[]> slots_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_FLIGHT_RECORDER_H_
