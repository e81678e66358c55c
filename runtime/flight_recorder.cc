#include "runtime/flight_recorder.h"

#include <algorithm>
#include <cstring>

namespace hora {

const char* FlightStateName(FlightState s) {
  switch (s) {
    case FlightState::kPending:
      return "pending";
    case FlightState::kRunning:
      return "running";
    case FlightState::kDone:
      return "done";
    case FlightState::kFailed:
      return "failed";
  }
  return "unknown";
}

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(capacity), slots_(capacity > 0 ? new Slot[capacity] : nullptr) {}

void FlightRecorder::Enqueued(int64_t handle, const TensorSpec& spec, int64_t now_us) {
  if (capacity_ == 0 || handle <= 0) return;
  Slot& s = SlotOf(handle);
  const size_t n = std::min(spec.name.size(), kNameBytes);
  MutexLock lock(&s.mu);
  if (s.handle > handle) return;  // a later handle took the slot already
  s.handle = handle;
  std::memcpy(s.name, spec.name.data(), n);
  s.name[n] = '\0';
  s.process_set = spec.process_set;
  s.kind = spec.collective;
  s.bytes = static_cast<int64_t>(spec.ByteSize());
  s.enqueue_us = now_us;
  s.start_us = 0;
  s.end_us = 0;
  s.state = FlightState::kPending;
}

void FlightRecorder::Started(int64_t handle, int64_t now_us) {
  if (capacity_ == 0 || handle <= 0) return;
  Slot& s = SlotOf(handle);
  MutexLock lock(&s.mu);
  if (s.handle != handle || s.state != FlightState::kPending) return;
  s.start_us = now_us;
  s.state = FlightState::kRunning;
}

void FlightRecorder::Ended(int64_t handle, bool ok, int64_t now_us) {
  if (capacity_ == 0 || handle <= 0) return;
  Slot& s = SlotOf(handle);
  MutexLock lock(&s.mu);
  if (s.handle != handle || s.end_us != 0) return;
  s.end_us = now_us;
  s.state = ok ? FlightState::kDone : FlightState::kFailed;
}

std::vector<FlightRecord> FlightRecorder::Snapshot() const {
  std::vector<FlightRecord> out;
  out.reserve(capacity_);
  for (size_t i = 0; i < capacity_; ++i) {
    const Slot& s = slots_[i];
    MutexLock lock(&s.mu);
    if (s.handle == 0) continue;
    FlightRecord r;
    r.handle = s.handle;
    r.name = s.name;
    r.process_set = s.process_set;
    r.kind = s.kind;
    r.bytes = s.bytes;
    r.enqueue_us = s.enqueue_us;
    r.start_us = s.start_us;
    r.end_us = s.end_us;
    r.state = s.state;
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(),
            [](const FlightRecord& a, const FlightRecord& b) { return a.handle < b.handle; });
  return out;
}

}  // namespace hora
