#include "runtime/steady_path.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>

#include "common/logging.h"
#include "common/thread_name.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;
// Once per bell value (*yielded remembers the last): yields the core until the bell moves or
// `until` passes. True when it moved: look at the board again instead of sleeping.
bool YieldForBell(const SteadyBoard& board, uint32_t bell, uint32_t* yielded,
                  Clock::time_point until) {
  if (bell == *yielded) return false;
  *yielded = bell;
  // The clock every 8 yields: a yield takes about a microsecond, a clock read a tenth of one.
  for (int i = 1; board.Bell() == bell; ++i) {
    if (i % 8 == 0 && Clock::now() >= until) break;
    sched_yield();
  }
  return board.Bell() != bell;
}

}  // namespace

SteadyPath::SteadyPath(int32_t process_set, std::vector<int> ranks, Parts parts, Host host,
                       SteadyOptions options, Timeline* timeline)
    : process_set_(process_set),
      ranks_(std::move(ranks)),
      comm_(std::move(parts.comm)),
      board_(std::move(parts.board)),
      host_(std::move(host)),
      options_(options),
      timeline_(timeline) {
  HORA_CHECK(board_ != nullptr);
  MutexLock drive(&drive_mu_);
  if (comm_) executor_ = std::make_unique<BucketExecutor>(comm_.get());
  eager_peer_.resize(board_->MaxEagerBytes());
  drive.Unlock();
  thread_ = std::thread([this] {
    SetThreadName("hora-steady");
    Loop();
  });
}

SteadyPath::~SteadyPath() { Stop(); }

bool SteadyPath::Find(const TensorSpec& spec, Lookup* found) const {
  MutexLock lock(&mu_);
  auto it = by_name_.find(spec.name);
  if (it == by_name_.end()) return false;
  const Entry& entry = entries_[it->second];
  *found = Lookup{it->second, entry.id, entry.spec == spec, pending_.count(it->second) != 0};
  return true;
}

void SteadyPath::Refuse(const Lookup& found) {
  MutexLock lock(&mu_);
  ++stats_.slow;
  (void)board_->Refuse(found.entry, ++entries_[found.entry].instance);
}

Status SteadyPath::Begin(const Lookup& found, Request* request, Ticket* ticket) {
  const uint32_t e = found.entry;
  const size_t bytes = request->spec.ByteSize();
  const void* input = request->input;
  bool eager = false;
  bool fuses = false;
  uint32_t n = 0;
  bool offer = true;
  bool stopping = false;
  {
    MutexLock lock(&mu_);
    Entry& entry = entries_[e];
    // What the engine's queue refuses (TensorQueue::Push), for what is held here.
    if (pending_.count(e) != 0 || (entry.fell_back && host_.queued(request->spec))) {
      return InFlightError(TensorKeyOf(request->spec));
    }
    // Checked under mu_: GiveBackHeld (after these flags are set) sees what is inserted.
    stopping = aborted_.load() || stop_.load();
    if (!stopping) n = ++entry.instance;
    if (stopping) {
      offer = false;
    } else if (board_->joined()) {
      ++stats_.slow;
      (void)board_->Refuse(e, n);
      entry.fell_back = true;
      offer = false;
    } else {
      ticket->deadline = Clock::now() + options_.patience;
      eager = Eager(e, entry, request->spec);  // before the request moves into pending_
      Pending p{n, found.id, ticket->deadline, std::move(*request)};
      p.eager = eager;
      p.fuses = fuses = entry.grouped;
      spare_.Insert(&pending_, e, std::move(p));
      held_.store(static_cast<int>(pending_.size()), std::memory_order_relaxed);
    }
  }
  if (stopping) {  // the job's error is read outside mu_ (it takes the engine's lock)
    Status job = host_.job_error();
    return job.ok() ? Aborted("Hora is shutting down") : job;
  }
  if (!offer) {  // the normal way
    host_.give_back(std::move(*request), true);
    return Status::Ok();
  }
  ticket->entry = e;
  ticket->instance = n;
  ticket->bell = board_->Bell();
  ticket->large = bytes > options_.inline_bytes;
  ticket->offered = true;
  if (eager) board_->PutEager(e, n, input, bytes);
  const SteadyBoard::Outcome o = board_->Offer(e, n, eager);
  if (o == SteadyBoard::Outcome::kFast) {
    // This member's offer was the last: the others' threads are waking for it now. Running
    // it here, if nobody else is driving, spares this member's thread a wake-up (only small
    // ones, unless the caller is prompt: the caller of an async call that it overlaps should
    // not wait for a long transfer; nor grouped ones: what the caller submits next while the
    // set's thread runs this one can join the next group).
    if (prompt_[e].load(std::memory_order_relaxed) != 0 && drive_mu_.TryLock()) {
      if (DriveLog(SIZE_MAX)) {
        ticket->returned = Clock::now();
        if (ticket->large) run_by_enqueue_.fetch_add(1, std::memory_order_relaxed);
      }
      drive_mu_.Unlock();
    } else if (!fuses) {
      (void)Progress();
    }
    // The board woke only the other members' threads: this member's wake when work is left
    // (too large to run inline, or behind the thread that holds drive_mu_).
    if (Unread()) board_->WakeOwn();
  }
  if (o != SteadyBoard::Outcome::kSlow) return Status::Ok();
  Request back;
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(e);
    if (it == pending_.end() || it->second.instance != n) return Status::Ok();  // handed back
    back = std::move(it->second.request);
    entries_[e].fell_back = true;
    Settle(it);
    ++stats_.slow;
  }
  host_.give_back(std::move(back), true);
  return Status::Ok();
}

bool SteadyPath::Unread() const {
  uint32_t e = 0;
  return board_->LogAt(cursor_.load(std::memory_order_seq_cst), &e) || board_->Pullable();
}

bool SteadyPath::Progress() {
  if (!Unread() || !drive_mu_.TryLock()) return false;
  const bool ran = DriveLog(options_.inline_bytes);
  drive_mu_.Unlock();
  return ran;
}

SteadyStats SteadyPath::Stats() const {
  MutexLock lock(&mu_);
  SteadyStats stats = stats_;
  stats.fast = fast_.load(std::memory_order_relaxed);
  stats.run_by_enqueue = run_by_enqueue_.load(std::memory_order_relaxed);
  stats.fused = fused_.load(std::memory_order_relaxed);
  return stats;
}

void SteadyPath::Joined() { board_->SetJoined(); }

void SteadyPath::Abort(const Status& reason) {
  aborted_.store(true, std::memory_order_seq_cst);  // helpers leave (the job's error fails them)
  if (comm_) comm_->Abort(reason);
  board_->Abort(reason);
  GiveBackHeld();
}

void SteadyPath::Stop() {
  stop_.store(true);
  if (board_) board_->WakeOwn();
  if (thread_.joinable()) thread_.join();
  if (board_) GiveBackHeld();
}

Clock::time_point SteadyPath::CheckPending() {
  std::vector<Request> back;
  std::vector<std::pair<int64_t, Status>> stalled;  // handle, the error that fails it
  Clock::time_point next = Clock::now() + options_.max_sleep;
  {
    MutexLock lock(&mu_);
    const Clock::time_point now = Clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      Pending& p = it->second;
      const uint64_t unread = cursor_.load(std::memory_order_seq_cst);
      SteadyBoard::Outcome o = board_->State(it->first, p.instance, unread);
      if (o == SteadyBoard::Outcome::kPending && (now >= p.deadline || board_->joined())) {
        o = board_->Withdraw(it->first, p.instance, unread);  // kSlow, or kFast if too late
      }
      if (o == SteadyBoard::Outcome::kSlow) {
        back.push_back(std::move(it->second.request));
        entries_[it->first].fell_back = true;
        ++stats_.slow;
        it = Settle(it);
        continue;
      }
      if (o == SteadyBoard::Outcome::kPending && now >= p.deadline) {  // it cannot withdraw
        Status stall = CheckStall(it->first, &p, now);
        if (!stall.ok()) {
          stalled.emplace_back(p.request.handle, std::move(stall));
          entries_[it->first].fell_back = true;
          it = Settle(it);
          continue;
        }
      } else if (o == SteadyBoard::Outcome::kPending) {
        next = std::min(next, p.deadline);
      }
      ++it;
    }
  }
  for (Request& r : back) host_.give_back(std::move(r), true);
  for (auto& [handle, stall] : stalled) {
    // The first member to report it fails the job (the coordinator tells every rank why).
    host_.complete(handle, host_.fail_job(stall), OpResult());
  }
  return next;
}

Status SteadyPath::CheckStall(uint32_t e, Pending* p, Clock::time_point now) {
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      now - (p->deadline - options_.patience));
  const bool warn = !p->warned && waited >= options_.stall_warning;
  const bool fail = options_.stall_timeout.count() > 0 && waited >= options_.stall_timeout;
  if (!warn && !fail) return Status::Ok();
  // Worded as the coordinator's stall report (coordinator/service_liveness.cc).
  std::vector<int> missing, ready;
  const std::vector<int> absent = board_->Missing(e, p->instance);
  for (int m = 0; m < static_cast<int>(ranks_.size()); ++m) {
    const bool gone = std::find(absent.begin(), absent.end(), m) != absent.end();
    (gone ? missing : ready).push_back(ranks_[static_cast<size_t>(m)]);
  }
  auto ranks = [](const std::vector<int>& list) {
    std::string out = list.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < list.size(); ++i) out += (i > 0 ? "," : "") + std::to_string(list[i]);
    return out;
  };
  char seconds[32];
  snprintf(seconds, sizeof(seconds), "%.1f s", static_cast<double>(waited.count()) / 1000.0);
  const std::string what = "stall on the steady path: tensor '" + p->request.spec.name +
                           "' submitted by " + ranks(ready) + " but not by " + ranks(missing) +
                           " for " + seconds;
  if (warn) {
    p->warned = true;
    HORA_LOG_WARN("{} (HORA_STALL_WARNING_SECONDS; every rank must submit it)", what);
  }
  if (!fail) return Status::Ok();
  return Aborted(what + " (HORA_STALL_TIMEOUT_SECONDS)");
}

void SteadyPath::GiveBackHeld() {
  std::vector<Request> back;
  {
    MutexLock lock(&mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      back.push_back(std::move(it->second.request));
      entries_[it->first].fell_back = true;
      it = Settle(it);
    }
  }
  for (Request& r : back) host_.give_back(std::move(r), false);
}

SteadyPath::PendingMap::iterator SteadyPath::Settle(PendingMap::iterator it) {
  settled_[it->first].store(it->second.instance, std::memory_order_release);
  auto next = std::next(it);
  (void)spare_.Extract(&pending_, it);
  held_.store(static_cast<int>(pending_.size()), std::memory_order_relaxed);
  return next;
}

bool SteadyPath::Settled(const Ticket& ticket) const {
  const uint32_t settled = settled_[ticket.entry].load(std::memory_order_acquire);
  return static_cast<int32_t>(settled - ticket.instance) >= 0;
}

void SteadyPath::Help(const Ticket& ticket, Clock::time_point deadline) {
  // Whether the caller waits for this entry promptly (SteadyOptions::prompt_wait) after Begin
  // returned;
  // only large instances ask (small ones run inline anyway): no clock read per small wait.
  if (ticket.large) {
    const Clock::time_point returned = ticket.returned != Clock::time_point()
                                           ? ticket.returned
                                           : ticket.deadline - options_.patience;
    const bool prompt = Clock::now() - returned <= options_.prompt_wait;
    if ((prompt_[ticket.entry].load(std::memory_order_relaxed) != 0) != prompt) {
      prompt_[ticket.entry].store(prompt ? 1 : 0, std::memory_order_relaxed);
    }
  }
  // Already ran (often inline in Begin, or in an earlier wait slice) or fell back: nothing to
  // help with, and the helper count (a line the peers' appends read) stays untouched.
  if (Settled(ticket)) return;
  board_->EnterHelp();
  // Refusals and withdrawals since the offer rang the bell; the patience ends at the
  // ticket's deadline (the set's thread checks the other pending instances).
  uint32_t checked_bell = ticket.bell;
  uint32_t yielded_bell = checked_bell - 1;
  Clock::time_point next_check = ticket.deadline;
  while (!stop_.load(std::memory_order_relaxed) && !aborted_.load(std::memory_order_seq_cst)) {
    const uint32_t bell = board_->Bell();
    if (Settled(ticket)) break;
    if (Unread()) {
      // Blocks while another thread drives (it may be running this very instance); then
      // runs what is left, or finds the instance gone from pending_ at the top.
      MutexLock drive(&drive_mu_);
      DriveLog(SIZE_MAX);
      continue;
    }
    Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    if (bell != checked_bell || now >= next_check) {  // a refusal, or the patience ran out
      checked_bell = bell;
      next_check = CheckPending();
      continue;
    }
    if (YieldForBell(*board_, bell, &yielded_bell, std::min(now + options_.yield, deadline)))
      continue;
    const auto wait = std::chrono::duration_cast<std::chrono::microseconds>(
        std::min({next_check, deadline, now + options_.max_sleep}) - now);
    board_->Sleep(bell, std::max<int64_t>(1, wait.count()), SteadyBoard::Role::kHelper);
  }
  board_->LeaveHelp();
  // The set's thread may have left an entry to this helper: hand it back.
  if (Unread()) board_->WakeOwn();
}

bool SteadyPath::DriveLog(size_t max_bytes) {
  bool ran = false;
  for (;;) {
    uint32_t probe = 0;  // at the log's end: what the board holds for its runner, if any
    if (!board_->LogAt(cursor_.load(std::memory_order_relaxed), &probe) && !board_->Pull()) {
      break;
    }
    std::vector<Claim>& group = group_;
    group.clear();
    {
      // The instances leave pending_ before the cursor passes their slots, all under mu_:
      // CheckPending, which looks for an unread slot of an instance that was passed on the
      // board (SteadyBoard::State), sees it either pending with its slot unread or not at all.
      MutexLock lock(&mu_);
      uint64_t next = cursor_.load(std::memory_order_relaxed);
      size_t bytes = 0;
      uint32_t e = 0;
      int last = -1;
      for (bool more = true; more && board_->LogAt(next, &e, &last, &more); ++next) {
        group.push_back(Claim{e, Pending{}, false, last});
        bytes += entries_[e].spec.ByteSize();
      }
      if (group.empty() || (max_bytes != SIZE_MAX && bytes > max_bytes)) break;
      for (Claim& c : group) {
        const Entry& entry = entries_[c.entry];
        auto it = pending_.find(c.entry);
        if (it != pending_.end()) {
          c.pending = std::move(it->second);
          c.held = true;
          Settle(it);
        } else {
          c.pending.instance = entry.instance;
          c.pending.id = entry.id;
          c.pending.deadline = Clock::now() + options_.patience;
          c.pending.eager = Eager(c.entry, entry, entry.spec);
        }
        const CollectiveType kind = entry.spec.collective;
        if (kind == CollectiveType::kAllgather || kind == CollectiveType::kAlltoall) {
          c.dims = entry.dims;
        }
      }
      cursor_.store(next, std::memory_order_seq_cst);
    }
    RunGroup(&group);
    ran = true;
    board_->Ran(cursor_.load(std::memory_order_relaxed));
  }
  return ran;
}

void SteadyPath::Loop() {
  // SIGPIPE is blocked: the thread starts under the engine's ScopedBlockSigpipe
  // (runtime/sigpipe.h), as every thread Hora starts.
  uint32_t checked_bell = board_->Bell() - 1;  // check once at the start
  uint32_t yielded_bell = checked_bell;
  Clock::time_point next_check = Clock::now();
  std::chrono::microseconds grace = options_.min_grace;
  bool grace_ended = false;  // the last sleep ended at the grace
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint32_t bell = board_->Bell();
    if (Unread() && board_->helpers() == 0) {
      if (grace_ended) grace = options_.min_grace;  // it found work nobody ran
      grace_ended = false;
      MutexLock drive(&drive_mu_);
      DriveLog(SIZE_MAX);
      continue;
    }
    if (grace_ended) grace = std::min<std::chrono::microseconds>(2 * grace, options_.max_grace);
    grace_ended = false;
    Clock::time_point now = Clock::now();
    if (bell != checked_bell || now >= next_check) {
      checked_bell = bell;
      next_check = CheckPending();
      now = Clock::now();
    }
    if (Unread() && board_->helpers() == 0) continue;
    // With a helper on this member the log is its business: no yielding here (the core goes
    // to a thread that has something to do), and appends do not wake this thread. Nor with
    // nothing offered by this member: the log holds only what every member offered (a job
    // that never waits, one rank, kept this thread yielding on every operation's bell).
    if (board_->helpers() == 0 && held_.load(std::memory_order_relaxed) > 0 &&
        YieldForBell(*board_, bell, &yielded_bell, now + options_.yield)) {
      continue;
    }
    board_->Tick();
    const auto wait = std::chrono::duration_cast<std::chrono::microseconds>(
        std::min({next_check, now + options_.max_sleep, now + grace}) - now);
    const bool woken =
        board_->Sleep(bell, std::max<int64_t>(1, wait.count()), SteadyBoard::Role::kDriver, true);
    grace_ended = !woken && wait >= grace;
  }
}

}  // namespace hora
