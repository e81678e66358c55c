// The steady path's board for members on any hosts (runtime/steady_board.h): they agree by
// messages (collectives/mailbox.h) instead of shared memory, with no trip to rank 0.
//
// Each member sends every other member one message per instance of an entry it submits:
// OFFER(e, n, its input) or REFUSE(e, n), and JOINED once it joins. A member's messages reach
// every member in the order it sent them, so every member sees the same sequence from each
// sender, and decides instance n of e from them alone:
//   - kFast once every member's message for n is an OFFER (this member's own included);
//   - kSlow once some member's message for n is a REFUSE, or a member joined (or its
//     connection ended) before it sent one for n.
// A member whose decision is still pending has not heard from somebody; whatever it later
// hears, its decision is the one every other member takes. An offer cannot be taken back
// (another member may already have decided kFast on it), so withdraws() is false: an instance
// whose offer waits long is reported as a stall (Missing names who did not offer), never
// withdrawn.
//
// Instances of at most the Eager size (kEagerBytes; less on two levels with more than 32
// members) are Eager: the data rides in the offer, so every member
// reduces all inputs itself once the last offer is in, waits inside no collective and needs
// no common order. Larger instances (only with a steady communicator: `ordered`) exchange
// their data in a collective on it, so every member must run them in one order: the order in
// which the set's lowest member (member 0) decided them. Member 0 appends a fast instance
// that is not Eager to its log and sends ORDER(e, n) to every member; the others append it
// when that ORDER arrives (member 0 decided it fast, so it is fast for everyone: the offers
// that made it so need not have reached them yet). That costs the others one more one-way
// message, not a trip to the coordinator. Member 0 orders in groups, as Horovod fuses what a
// cycle found ready: what it decides waits until whoever runs its log asks for more (Pull,
// when the log is read to its end and the last group ran; Ran, when the last group ran while
// more waited), and then all of it goes out as one group, one message of ORDERs whose
// records say that the group goes on; every member appends a group whole, so every member
// sees the same groups and may fuse each (SteadyPath runs the tensors of a group that fit one
// bucket as one collective). A burst of submissions thus becomes one group when member 0's
// runner wakes after it began; a caller that runs the log itself (a prompt one) pulls at
// once, so a lone instance waits for nothing. Without a steady communicator only allreduces of
// at most kEagerBytes are cached (Runs). Each member keeps, per entry and instance parity,
// every member's last message, as the shared board keeps its eager slots: a member offers
// n + 2 only after n + 1 completed everywhere it matters (see steady_shm_board.h), so a slot
// is never overwritten before this member read it.
//
// Routes (runtime/steady_net_routes.h): on several hosts with several members on some host,
// messages go through each host's leader (two levels). Every member still ends up holding
// every member's message for an instance it decides (relayed ones name their origin), so it
// decides as above; a leader relays what it has once its host's messages for the instance are
// all in (to the other leaders) and once it decided it (to its host's members), and member
// 0's ORDERs go to the leaders, which pass them on; so does a JOINED, and a leader that loses
// a member's connection tells the others (GONE). An instance a leader has heard of but not
// decided for kPartialAfterUs is a stall in the making: the leader then sends what it has to
// the other leaders and its members (Tick), so that every member can name who is missing.
//
// Waiting: a sleeping thread polls the members' connections and its own eventfd; whoever
// reads a message that decides an instance rings the bell and wakes this member's other
// sleepers (the appending thread's own wake-ups are the caller's business, as on shm). A
// lazy driver polls only its eventfd while a helper reads the messages, or, unless it relays
// for its host (a leader), while this member has no offer open.
#ifndef HORA_RUNTIME_STEADY_NET_BOARD_H_
#define HORA_RUNTIME_STEADY_NET_BOARD_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "collectives/mailbox.h"
#include "common/mutex.h"
#include "runtime/steady_board.h"
#include "runtime/steady_net_routes.h"
#include "runtime/steady_net_wire.h"

namespace hora {

class NetSteadyBoard final : public SteadyBoard {
 public:
  // The largest allreduce it caches: the coordinator's inline reduction carries as much.
  static constexpr size_t kEagerBytes = 16 << 10;
  // Two levels: a leader's relay carries every member's data, so Eager instances are smaller
  // on large sets (kRelayBytes / members; 16 KiB up to 32 members).
  static constexpr size_t kRelayBytes = 512 << 10;
  // Flat, every member sends each of its offers to every other member; on two levels the
  // leaders do, one per host (128 hosts: 1,024 ranks at 8 per host).
  static constexpr int kMaxFlatMembers = 64;
  static constexpr int kMaxHosts = 128;
  static constexpr int kMaxMembers = 1024;
  static constexpr int64_t kPartialAfterUs = 250 * 1000;
  // An offer made while an earlier one of this member is open waits to go out with what this
  // member sends next (its messages are read, decide or relay something, or another offer
  // completes an instance), at most this long: a burst of per-parameter allreduces costs a
  // few messages instead of one per tensor (Horovod sends one bit vector per cycle). The
  // bound matters only when members submit in different orders.
  static constexpr int64_t kDeferUs = 1000;

  // ordered: the set has a steady communicator (instances larger than the Eager size run on
  // it). hostnames: per member (empty: flat).
  NetSteadyBoard(std::unique_ptr<Mailbox> box, bool ordered,
                 const std::vector<std::string>& hostnames = {});
  // Why a set of these members cannot use the board (empty: it can).
  static std::string Refusal(int members, const std::vector<std::string>& hostnames);
  ~NetSteadyBoard() override;

  const char* name() const override { return "tcp"; }
  bool Runs(size_t bytes) const override {
    return bytes > 0 && (ordered_ || bytes <= eager_bytes_);
  }
  bool Eager(uint32_t, size_t bytes) const override { return bytes > 0 && bytes <= eager_bytes_; }
  size_t MaxEagerBytes() const override { return eager_bytes_; }
  bool AgreesCheaply() const override { return false; }  // messages per instance
  Outcome Offer(uint32_t e, uint32_t n, bool eager = false) override;
  Outcome Refuse(uint32_t e, uint32_t n) override;
  Outcome State(uint32_t e, uint32_t n, uint64_t unread) const override;
  Outcome Withdraw(uint32_t e, uint32_t n, uint64_t unread) override;
  bool withdraws() const override { return false; }
  std::vector<int> Missing(uint32_t e, uint32_t n) const override;
  void PutEager(uint32_t e, uint32_t n, const void* data, size_t bytes) override;
  bool GetEager(uint32_t e, uint32_t n, int m, void* data, size_t bytes) const override;
  bool LogAt(uint64_t index, uint32_t* e, int* last = nullptr, bool* more = nullptr) const override;
  void Ran(uint64_t next) override;
  bool Pullable() const override { return pullable_.load(std::memory_order_acquire); }
  bool Pull() override;
  uint32_t Bell() const override;  // reads what has arrived first (if nobody else is)
  bool Sleep(uint32_t seen, int64_t timeout_us, Role role, bool lazy = false) override;
  void Wake() override { Wake(true); }  // the others wake on this member's messages
  void WakeOwn() override { Wake(true); }
  void EnterHelp() override { helpers_.fetch_add(1, std::memory_order_seq_cst); }
  void LeaveHelp() override;
  int helpers() const override { return helpers_.load(std::memory_order_seq_cst); }
  int sleeping(Role role) const override;
  void SetJoined() override;
  bool joined() const override { return joined_.load(std::memory_order_acquire); }
  void Abort(const Status& reason) override;
  void Tick() override;
  bool two_level() const { return routes_.two_level(); }

 private:
  using Kind = steady_wire::Kind;
  struct Slot {  // one member's message for instance `instance` (of its parity)
    uint32_t instance = 0;
    Kind kind = Kind::kNone;
    bool eager = false;  // an offer of an Eager instance (its data here)
    // This member's own offer, decided fast, not Eager: open until member 0's ORDER comes.
    bool awaiting_order = false;
    std::vector<char> data;
  };
  struct Outgoing {              // a message to send once mu_ is released, in queue order
    const std::vector<int>* to;  // null: every other member
    std::vector<char> message;
  };
  struct Relay {  // a leader's relaying of one instance (two levels)
    uint32_t instance = 0;
    bool host_sent = false;  // its host's messages went to the other leaders
    bool forwarded = false;  // what it had at the decision went to its host's members
    int64_t first_us = 0;    // when it first heard of the instance (0: not yet)
    int partial_heard = 0;   // how many members' messages its last partial carried
  };
  struct Decision {
    uint32_t instance = 0;
    Outcome outcome = Outcome::kPending;
  };
  struct EntryState {
    std::vector<Slot> slots[2];  // by instance parity, then member
    Decision decided[2];
    Relay relay[2];
  };

  // Records member m's message (kind, e, n, data) and decides n if it can; returns the
  // decision it took now (kPending if none).
  Outcome Record(int m, Kind kind, bool eager, uint32_t e, uint32_t n, const char* data,
                 size_t bytes) REQUIRES(mu_);
  Outcome Decide(uint32_t e, uint32_t n, int last) REQUIRES(mu_);
  // Writes a log slot; the slots become readable with the last one of its group (!more).
  void Append(uint32_t e, int last, bool more) REQUIRES(mu_);
  struct Ordered {  // an instance member 0 decided fast that is not Eager
    uint32_t e = 0;
    uint32_t n = 0;
    int last = -1;
  };
  // Member 0: appends `group` to the log as one group and sends its ORDERs in one message.
  void OrderGroup(const std::vector<Ordered>& group) REQUIRES(mu_);
  // Member 0: orders what it holds as one group; false if it holds nothing.
  bool OrderHeld() REQUIRES(mu_);
  // Queues one record of this member's own to where its own messages go.
  void QueueOwn(Kind kind, uint32_t e, uint32_t n, bool eager, const std::vector<char>& data)
      REQUIRES(mu_);
  // Queues, to `to`, the messages for instance n of e of the listed members (null: all) that
  // this member holds; false if it holds none.
  bool QueueHeld(const std::vector<int>* to, uint32_t e, uint32_t n, const std::vector<int>* of)
      REQUIRES(mu_);
  // Queues a JOINED or GONE of `origin` to whom has not heard it, from where it came (`from`:
  // the member that sent it; -1: this member).
  void QueueNews(Kind kind, int origin, int from) REQUIRES(mu_);
  // The connection to member m ended: what this member can no longer hear from is gone.
  void Lost(int m) REQUIRES(mu_);
  // Two levels, a leader: relays what instance n of e now calls for (see the header).
  void RelayInstance(uint32_t e, uint32_t n) REQUIRES(mu_);
  // Sends what was queued, in queue order (one sender at a time).
  void Flush();
  static int64_t NowUs();

  EntryState& At(uint32_t e) REQUIRES(mu_);
  // Reads what arrived (if no other thread is reading); true if it decided anything.
  bool Drain() const;
  // Member m is gone (joined, or its connection ended): what waits on it is slow.
  void Gone(int m) REQUIRES(mu_);
  // Rings the bell and wakes this member's sleeping helpers; its sleeping drivers too when
  // `everyone` or when it has no helper (EnterHelp .. LeaveHelp) to read the connections.
  void Wake(bool everyone);
  // Decides instance n (once), counting this member's offer as no longer open: at once, or,
  // fast and not Eager on a member other than 0, once its ORDER came (`ordered`).
  void Settle(EntryState* s, uint32_t n, Outcome outcome, bool ordered = false) REQUIRES(mu_);

  const std::unique_ptr<Mailbox> box_;
  const int member_;
  const int members_;
  const bool ordered_;
  const SteadyRoutes routes_;
  const size_t eager_bytes_;

  mutable Mutex read_mu_;  // one reader of box_ at a time (Drain)
  mutable Mutex mu_;
  std::vector<std::unique_ptr<EntryState>> entries_ GUARDED_BY(mu_);
  std::vector<bool> gone_ GUARDED_BY(mu_);
  std::vector<Outgoing> outbox_ GUARDED_BY(mu_);
  Mutex flush_mu_;  // one sender of the outbox at a time
  std::atomic<int64_t> next_tick_us_{0};
  std::atomic<int64_t> deferred_until_us_{0};  // offers wait in outbox_ until then (0: none)
  // The log: (entry, more, last member) per slot; written under mu_, read without it up to
  // tail_ (the end of the last whole group).
  static constexpr uint64_t kMoreBit = uint64_t{1} << 31;
  std::unique_ptr<std::atomic<uint64_t>[]> log_;
  uint64_t written_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> tail_{0};
  // Member 0: a group it ordered that it has not run yet (it ends at open_end_), and what it
  // decided since, ordered as the next group once it ran that one (Ran).
  bool group_open_ GUARDED_BY(mu_) = false;
  uint64_t open_end_ GUARDED_BY(mu_) = 0;
  std::vector<Ordered> held_orders_ GUARDED_BY(mu_);
  std::atomic<bool> pullable_{false};  // !held_orders_.empty() && !group_open_
  std::atomic<uint32_t> bell_{0};
  std::atomic<bool> joined_{false};
  std::atomic<int> helpers_{0};

  mutable Mutex sleep_mu_;
  std::vector<int> sleeping_fds_[2] GUARDED_BY(sleep_mu_);  // by Role: an eventfd per thread
  std::vector<int> spare_fds_ GUARDED_BY(sleep_mu_);
  std::atomic<int> open_offers_{0};  // this member's offers not decided yet
};

}  // namespace hora

#endif  // HORA_RUNTIME_STEADY_NET_BOARD_H_
