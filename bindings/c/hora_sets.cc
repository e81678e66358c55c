// hora.h's process sets, point-to-point, barrier, join and refusal.
#include <vector>

#include "bindings/c/api_util.h"

using hora::Code;
using hora::Engine;
using hora::Status;
using namespace hora::capi;

extern "C" {

hora_status_t hora_barrier_async(int32_t process_set, hora_handle_t* handle) {
  return EnqueueWith(handle, [&](Engine& e) { return e.EnqueueBarrier(process_set); });
}

hora_status_t hora_join_async(int32_t process_set, hora_handle_t* handle) {
  return EnqueueWith(handle, [&](Engine& e) { return e.EnqueueJoin(process_set); });
}

hora_status_t hora_send_async(const hora_tensor_t* tensor, int32_t peer, int32_t tag,
                              int32_t process_set, hora_handle_t* handle) {
  hora::TensorSpec spec;
  if (hora_status_t s = ToSpec("send", tensor, hora::CollectiveType::kSend, &spec)) return s;
  if (tag < 0)
    return Fail(Code::kInvalidArgument, "send: tag " + std::to_string(tag) + " is negative");
  spec.process_set = process_set;
  return EnqueueWith(
      handle, [&](Engine& e) { return e.EnqueueSend(std::move(spec), tensor->data, peer, tag); });
}

hora_status_t hora_recv_async(const hora_tensor_t* tensor, int32_t peer, int32_t tag,
                              int32_t process_set, hora_handle_t* handle) {
  hora::TensorSpec spec;
  if (hora_status_t s = ToSpec("recv", tensor, hora::CollectiveType::kRecv, &spec)) return s;
  if (tag < 0)
    return Fail(Code::kInvalidArgument, "recv: tag " + std::to_string(tag) + " is negative");
  spec.process_set = process_set;
  return EnqueueWith(
      handle, [&](Engine& e) { return e.EnqueueRecv(std::move(spec), tensor->data, peer, tag); });
}

hora_status_t hora_refuse(const char* name, int32_t process_set, const char* message) {
  if (name == nullptr || message == nullptr) {
    return Fail(Code::kInvalidArgument, "name or message is NULL");
  }
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  hora::TensorSpec spec;
  spec.name = name;
  spec.process_set = process_set;
  Status s = e->Refuse(std::move(spec), hora::InvalidArgument(message));
  return s.code() == Code::kInvalidArgument && s.message().find(message) != std::string::npos
             ? Report(Status::Ok())
             : Report(s);
}

hora_status_t hora_process_set_add(const int32_t* ranks, int32_t nranks, const char* cpu_operations,
                                   int32_t* id) {
  if (id == nullptr) return Fail(Code::kInvalidArgument, "id pointer is NULL");
  if (nranks < 0 || nranks > (1 << 20) || (nranks > 0 && ranks == nullptr)) {
    return Fail(Code::kInvalidArgument,
                "ranks is NULL or nranks " + std::to_string(nranks) + " is out of range");
  }
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  auto r = e->AddProcessSet(std::vector<int>(ranks, ranks + nranks),
                            cpu_operations == nullptr ? "" : cpu_operations);
  if (!r.ok()) return Fail(r.status());
  *id = r.value();
  return Report(Status::Ok());
}

hora_status_t hora_process_set_remove(int32_t id) {
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  return Report(e->RemoveProcessSet(id));
}

hora_status_t hora_steady_stats(int32_t id, int64_t* fast, int64_t* slow, int64_t* entries) {
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  auto stats = e->Steady(id);
  if (!stats.ok()) return Report(stats.status());
  if (fast != nullptr) *fast = stats.value().fast;
  if (slow != nullptr) *slow = stats.value().slow;
  if (entries != nullptr) *entries = stats.value().entries;
  return HORA_OK;
}

hora_status_t hora_control_stats(int64_t* messages, int64_t* notices) {
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  const hora::ControlCounters sent = e->ControlSent();
  if (messages != nullptr) *messages = sent.messages;
  if (notices != nullptr) *notices = sent.notices;
  return HORA_OK;
}

hora_status_t hora_process_set_rank(int32_t id, int32_t* rank) {
  if (rank == nullptr) return Fail(Code::kInvalidArgument, "rank pointer is NULL");
  return WithSet(id, [&](const hora::ProcessSetInfo& s) {
    *rank = s.rank;
    return Status::Ok();
  });
}

hora_status_t hora_process_set_size(int32_t id, int32_t* size) {
  if (size == nullptr) return Fail(Code::kInvalidArgument, "size pointer is NULL");
  return WithSet(id, [&](const hora::ProcessSetInfo& s) {
    *size = static_cast<int32_t>(s.ranks.size());
    return Status::Ok();
  });
}

hora_status_t hora_process_set_included(int32_t id, int* included) {
  if (included == nullptr) return Fail(Code::kInvalidArgument, "included pointer is NULL");
  return WithSet(id, [&](const hora::ProcessSetInfo& s) {
    *included = s.rank >= 0 ? 1 : 0;
    return Status::Ok();
  });
}

hora_status_t hora_process_set_ranks(int32_t id, int32_t* ranks, int32_t max, int32_t* n) {
  if (n == nullptr || (ranks == nullptr && max > 0)) {
    return Fail(Code::kInvalidArgument, "ranks or n pointer is NULL");
  }
  return WithSet(id, [&](const hora::ProcessSetInfo& s) {
    *n = static_cast<int32_t>(s.ranks.size());
    for (int32_t i = 0; i < *n && i < max; ++i) ranks[i] = s.ranks[i];
    return Status::Ok();
  });
}

hora_status_t hora_process_set_ids(int32_t* ids, int32_t max, int32_t* n) {
  if (n == nullptr || (ids == nullptr && max > 0)) {
    return Fail(Code::kInvalidArgument, "ids or n pointer is NULL");
  }
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  std::vector<int32_t> all = e->ProcessSetIds();
  *n = static_cast<int32_t>(all.size());
  for (int32_t i = 0; i < *n && i < max; ++i) ids[i] = all[i];
  return Report(Status::Ok());
}

}  // extern "C"
