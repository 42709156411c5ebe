// The event loop of Algorithm mode, compiled (simcoll/simulator/compiled.py).
//
// A statement-by-statement transcription of the Python hot path it stands in
// for, so that every time comes out bit for bit the same:
//   - simcoll/simulator/algorithm_mode.py, _Run: _start_private, _start_shared,
//     _release, _complete, _landed_at, _land_private, _sent, _landed, run;
//   - simcoll/simulator/network.py, FluidNetwork: launch, _route_info (with
//     _Dominance.kept and _restore), _set_rate, _mark_dirty, _flush,
//     _handover, _recompute (with its memory of sharing patterns), _complete,
//     _arrive; _max_min (components of fewer than 24 flows) and
//     _Sparse.max_min (the others); alone_rate_Bps;
//   - SimPy's event queue: events ordered by (time, creation number), the
//     time of an event being the clock plus its delay, as simpy.Timeout does.
// Each function below names the Python one it follows; a change to one must be
// made to the other (tests/test_sim_compiled.py compares them bit for bit).
//
// Doubles only, no fused multiply-add (built with -ffp-contract=off): the
// arithmetic is Python's float arithmetic, operation for operation.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kRelTol = 1e-12;                  // network._REL_TOL
constexpr std::size_t kNumpyFrom = 24;             // network._NUMPY_FROM
constexpr std::size_t kRememberUpTo = 96;          // network._REMEMBER_UP_TO
constexpr std::int64_t kSolvedMaxFlows = 1000000;  // network._SOLVED_MAX_FLOWS
constexpr double kDominanceMargin = 1e-6;          // network._Dominance.margin
constexpr int kBatch = 64;                         // engine._BATCH

volatile std::sig_atomic_t g_interrupted = 0;  // Ctrl-C during a run (sc_run, catch_interrupt)
extern "C" void on_interrupt(int) { g_interrupted = 1; }

}  // namespace

extern "C" {

// ctypes mirror: simcoll.simulator.compiled.ScRun. Arrays are borrowed from
// Python; those marked "in/out" are written.
struct ScRun {
  // messages (the plan's, or its quotient's)
  std::int32_t* pending;  // in/out: reads each message still waits for
  const std::int32_t* msg_q;
  const double* msg_size;   // payload bytes (_Run._payload)
  const double* msg_after;  // reduction time after arrival (_Run._payload)
  const std::uint8_t* msg_reduce;
  const std::int64_t* rel_off;  // the slots a landing updates (_Run._complete), CSR
  const std::int64_t* rel_slot;
  double* msg_start;  // out
  double* msg_wire;   // out
  // wait tables (_Run._wait_tables)
  std::int32_t* arrived;  // in/out
  std::int64_t* cursor;   // in/out
  const std::int64_t* slot_end;
  const std::int32_t* w_landed;
  const std::int64_t* w_msg;
  // rank pairs' queues (_Run._queues)
  const std::int64_t* q_off;
  const std::int64_t* q_msg;
  const std::uint8_t* q_fast;
  const double* q_alpha_hop;  // α + the protocol's hop latency (private pairs)
  const double* q_good;
  const double* q_good_reduce;
  const double* q_alpha;      // the route's α (FluidNetwork.route)
  const double* q_bandwidth;  // the route's bandwidth
  const double* q_alone;      // alone_rate_Bps of the whole route
  const std::int64_t* r_off;  // the route's resources and weights, CSR
  const std::int32_t* r_res;
  const double* r_w;
  // resources
  const double* res_one_flow;  // Resource._one_flow_Bps
  const std::uint8_t* res_varies;
  const std::int64_t* cap_off;  // per resource: effective_capacity_Bps(n) for n = 0.., CSR (empty: one flow's)
  const double* cap_table;
  // scalars
  std::int64_t n_msgs;
  std::int64_t n_q;
  std::int64_t n_res;
  std::int64_t routes_before;  // FluidNetwork._uses_table.count at the start
  double efficiency;
  double reduce_cap;
  double hop_latency;
  double wall_limit_s;  // wall-clock seconds left
  std::int32_t contention;
  std::int32_t catch_interrupt;  // stop at Ctrl-C (status 3): the caller is the main thread
  std::int32_t status;  // out: 0 done, 1 wall-clock limit while running, 2 while starting queues, 3 Ctrl-C
  // outputs
  std::int64_t events;
  std::int64_t transfers;
  std::int64_t max_sharing;
  std::int64_t recomputes;
  std::int64_t remembered;
  std::int64_t handovers;
  std::int64_t landed_count;
  std::int64_t stopped_at;  // queues started when the limit was reached (status 2)
  double last_s;
  double now_s;
};

int sc_run_struct_size() { return static_cast<int>(sizeof(ScRun)); }

}  // extern "C"

namespace {

enum EventKind : std::int32_t { kFlowDone = 0, kArrive = 1, kFlush = 2, kLandPrivate = 3 };

struct Event {  // 24 bytes: millions are pending at once on 1,024 GPUs (a heap of 16-40 MB)
  double time;
  std::int64_t key;  // eid << 2 | kind: eids are unique, so (time, key) orders events as (time, eid)
  std::int64_t ref;  // flow slot; kLandPrivate: the landing time's bits
  std::int64_t eid() const { return key >> 2; }
  EventKind kind() const { return static_cast<EventKind>(key & 3); }
  bool operator<(const Event& o) const { return time < o.time || (time == o.time && key < o.key); }
};

// The pending events, earliest first: a 4-ary heap, half the levels of a binary one, whose four
// children share cache lines (pops of a heap of millions miss the cache at every level). Events
// are totally ordered, so any heap pops them in the same order.
class EventQueue {
 public:
  bool empty() const { return a_.empty(); }
  const Event& top() const { return a_.front(); }
  void push(const Event& ev) {
    std::size_t i = a_.size();
    a_.push_back(ev);
    while (i > 0) {
      std::size_t parent = (i - 1) / 4;
      if (!(ev < a_[parent])) break;
      a_[i] = a_[parent];
      i = parent;
    }
    a_[i] = ev;
  }
  void pop() {
    Event last = a_.back();
    a_.pop_back();
    const std::size_t n = a_.size();
    if (n == 0) return;
    std::size_t i = 0;
    for (;;) {
      std::size_t first = 4 * i + 1;
      if (first >= n) break;
      std::size_t best = first, end = first + 4 < n ? first + 4 : n;
      for (std::size_t c = first + 1; c < end; ++c)
        if (a_[c] < a_[best]) best = c;
      if (!(a_[best] < last)) break;
      a_[i] = a_[best];
      i = best;
    }
    a_[i] = last;
  }

 private:
  std::vector<Event> a_;
};

struct Route {  // FluidNetwork._fast[pair]: the route as launch and the max-min read it
  bool ready = false;
  double alpha = 0, bandwidth = 0, alone = 0;
  std::vector<std::int32_t> res;  // kept resources (dominated ones left out), route order
  std::vector<double> w;
  std::int64_t order = 0;  // _Uses.order
  std::int32_t at = 0;     // res in Core::flat_res_ (its count, then the ids) and w in flat_w_, alike
};

struct Flow {  // (its route: Core::hot_)
  std::int64_t id = 0;
  double bound = 0, remaining = 0, rate = 0, t_last = 0, alpha_s = 0, after_s = 0, start_s = 0, wire_end = 0;
  std::int64_t msg = 0;
  std::int64_t done_eid = -1;
  bool active = false;
};

struct Resource {
  // _Dominance
  bool known_set = false;
  std::vector<std::int32_t> candidates;
  std::unordered_set<std::int32_t> left_out;
  double residual = 0, weight_sum = 0;  // (dict_max_min's scratch)
  std::int32_t dirty = 0;
};

struct SlotHot {  // per flow slot, side by side: what the component search and its sort read of each flow
  std::int64_t mark;  // the recomputation that reached it last
  std::int64_t key;   // route order << 40 | flow id (network._ORDER)
  std::int32_t q;     // its route
  std::int32_t at;    // its route's kept resources in Core::flat_res_ (Route::at)
};

struct LeftFlow {
  std::int32_t q;
  double bound, rate;
};

class Core {
 public:
  explicit Core(ScRun* in)
      : in_(in),
        routes_(in->n_q),
        res_(in->n_res),
        res_flows_(in->n_res),
        res_seen_(in->n_res, -1),
        res_local_(in->n_res, 0) {
    q_head_.assign(in->n_q, 0);
    q_free_.assign(in->n_q, 0.0);
    q_busy_.assign(in->n_q, 0);
    uses_count_ = in->routes_before;
    double limit_s = in->wall_limit_s > 0 ? (in->wall_limit_s < 1e9 ? in->wall_limit_s : 1e9) : 0.0;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(limit_s));
  }

  void run() {
    // _Run.run: start every pair's queue, then the events
    for (std::int64_t qi = 0; qi < in_->n_q; ++qi) {
      if (qi % 1024 == 1023 && (past_deadline() || g_interrupted)) {
        in_->status = g_interrupted ? 3 : 2;
        in_->stopped_at = qi;
        finish();
        return;
      }
      if (in_->q_fast[qi])
        start_private(qi, 0.0);
      else
        start_shared(qi);
    }
    std::int64_t events = 0;
    while (!heap_.empty()) {
      Event ev = heap_.top();
      heap_.pop();
      now_ = ev.time;
      dispatch(ev);
      ++events;
      if (events % kBatch == 0 && (past_deadline() || g_interrupted)) {
        in_->status = g_interrupted ? 3 : 1;
        in_->events = events;
        finish();
        return;
      }
    }
    in_->events = events;
    finish();
  }

 private:
  ScRun* in_;
  std::vector<Route> routes_;
  std::vector<Resource> res_;
  std::vector<std::vector<std::int32_t>> res_flows_;  // per resource: the slots of the flows registered on it
  std::vector<std::int64_t> res_seen_;   // per resource: the recomputation that reached it last
  std::vector<std::int32_t> res_local_;  // per resource: its index among a component's (sparse_max_min)
  // scratch of recompute and sparse_max_min, kept between calls (millions of small components)
  std::vector<std::int32_t> seen_, comp_, todo_, entry_flow_, active_, live_, at_;
  std::vector<std::int32_t> flat_res_;  // every route's kept resources, one after the other (flatten)
  std::vector<double> flat_w_;
  std::vector<std::pair<std::int64_t, std::int32_t>> keyed_;
  std::vector<std::int64_t> off_, fill_;
  std::vector<double> bound_, entry_w_, residual_, weight_sum_, share_, newly_sum_;
  std::vector<char> unfrozen_, newly_, touched_;
  std::vector<Flow> flows_;
  // per slot, apart from Flow: what the component search, its sort and the max-min read of every flow
  std::vector<SlotHot> hot_;
  std::vector<std::int32_t> free_slots_;
  EventQueue heap_;
  std::int64_t next_eid_ = 0, next_flow_ = 0, uses_count_ = 0;
  double now_ = 0.0;
  std::vector<std::int64_t> q_head_;
  std::vector<double> q_free_;
  std::vector<std::uint8_t> q_busy_;
  std::unordered_map<double, std::vector<std::int64_t>> landings_;
  std::vector<std::int32_t> dirty_;
  bool flush_scheduled_ = false;
  std::vector<LeftFlow> left_;
  std::vector<std::int32_t> joined_;
  std::unordered_map<std::string, std::vector<double>> solved_;
  std::int64_t solved_flows_ = 0;
  std::int64_t stamp_ = 0;
  std::int64_t transfers_ = 0, max_sharing_ = 1, recomputes_ = 0, remembered_ = 0, handovers_ = 0;
  std::int64_t landed_count_ = 0;
  double last_s_ = 0.0;
  std::chrono::steady_clock::time_point deadline_;

  bool past_deadline() const { return std::chrono::steady_clock::now() > deadline_; }

  void finish() {
    in_->transfers = transfers_;
    in_->max_sharing = max_sharing_;
    in_->recomputes = recomputes_;
    in_->remembered = remembered_;
    in_->handovers = handovers_;
    in_->landed_count = landed_count_;
    in_->last_s = last_s_;
    in_->now_s = now_;
  }

  // simpy.Timeout(env, delay, value): due at now + delay, after the events already due then
  std::int64_t schedule(double delay, std::int32_t kind, std::int64_t ref, double value = 0.0) {
    std::int64_t eid = next_eid_++;
    if (kind == kLandPrivate) std::memcpy(&ref, &value, sizeof ref);
    heap_.push(Event{now_ + delay, eid << 2 | kind, ref});
    return eid;
  }

  void dispatch(const Event& ev) {
    switch (ev.kind()) {
      case kFlowDone: {  // FluidNetwork._on_complete
        Flow& f = flows_[ev.ref];
        if (f.done_eid == ev.eid()) complete_flow(static_cast<std::int32_t>(ev.ref));
        break;
      }
      case kArrive:
        arrive(static_cast<std::int32_t>(ev.ref));
        break;
      case kFlush:
        flush();
        break;
      case kLandPrivate: {
        double when;
        std::memcpy(&when, &ev.ref, sizeof when);
        land_private(when);
        break;
      }
    }
  }

  // -- resources ---------------------------------------------------------------------------------
  // Resource.effective_capacity_Bps(n)
  double capacity(std::int32_t r, std::int64_t n) const {
    std::int64_t lo = in_->cap_off[r], hi = in_->cap_off[r + 1];
    if (lo == hi || n <= 1) return in_->res_one_flow[r];
    std::int64_t last = hi - lo - 1;
    return in_->cap_table[lo + (n < last ? n : last)];
  }

  // alone_rate_Bps(bound, resources)
  double alone_rate(double bound, const Route& route) const {
    double rate = bound;
    for (std::size_t i = 0; i < route.res.size(); ++i) {
      double share = in_->res_one_flow[route.res[i]] / route.w[i];
      if (share < rate) rate = share;
    }
    return rate;
  }

  // _Dominance.kept: the route without the resources it may leave out; pairs whose domination ended
  void kept(std::int64_t q, std::vector<std::int32_t>& out_res, std::vector<double>& out_w,
            std::vector<std::int32_t>& revoked) {
    std::int64_t lo = in_->r_off[q], hi = in_->r_off[q + 1];
    // (routes list each resource once: checked in Python, so the weight of a resource is its entry's)
    auto weight_of = [&](std::int32_t rid) -> double {
      for (std::int64_t i = lo; i < hi; ++i)
        if (in_->r_res[i] == rid) return 0.0 + in_->r_w[i];
      return -1.0;
    };
    std::vector<std::pair<std::int32_t, double>> firm;
    bool firm_made = false;
    std::vector<char> dominated(hi - lo, 0);
    for (std::int64_t i = lo; i < hi; ++i) {
      std::int32_t rid = in_->r_res[i];
      double w = 0.0 + in_->r_w[i];
      Resource& r = res_[rid];
      if (!r.known_set) {
        r.known_set = true;
        r.candidates.clear();
        if (!in_->res_varies[rid]) {
          if (!firm_made) {
            firm_made = true;
            for (std::int64_t j = lo; j < hi; ++j) {
              std::int32_t o = in_->r_res[j];
              if (!in_->res_varies[o]) firm.emplace_back(o, in_->res_one_flow[o] * (1 + kDominanceMargin));
            }
          }
          double cap = in_->res_one_flow[rid];
          for (auto& [other, least] : firm)
            if (other != rid && cap >= least && weight_of(other) >= w) r.candidates.push_back(other);
        }
      } else if (!r.candidates.empty()) {
        std::size_t before = r.candidates.size();
        r.candidates.erase(std::remove_if(r.candidates.begin(), r.candidates.end(),
                                          [&](std::int32_t other) { return weight_of(other) < w; }),
                           r.candidates.end());
        if (r.candidates.size() != before && r.candidates.empty()) {
          revoked.insert(revoked.end(), r.left_out.begin(), r.left_out.end());
          r.left_out.clear();
        }
      }
      if (!r.candidates.empty()) {
        dominated[i - lo] = 1;
        r.left_out.insert(static_cast<std::int32_t>(q));
      }
    }
    out_res.clear();
    out_w.clear();
    for (std::int64_t i = lo; i < hi; ++i)
      if (!dominated[i - lo]) {
        out_res.push_back(in_->r_res[i]);
        out_w.push_back(in_->r_w[i]);
      }
  }

  // FluidNetwork._route_info
  Route& route_info(std::int32_t q) {
    Route& route = routes_[q];
    route.alpha = in_->q_alpha[q];
    route.bandwidth = in_->q_bandwidth[q];
    route.alone = in_->q_alone[q];
    std::vector<std::int32_t> revoked;
    if (in_->contention) {
      kept(q, route.res, route.w, revoked);
    } else {
      route.res.assign(in_->r_res + in_->r_off[q], in_->r_res + in_->r_off[q + 1]);
      route.w.assign(in_->r_w + in_->r_off[q], in_->r_w + in_->r_off[q + 1]);
    }
    flatten(route);
    if (!revoked.empty()) restore(revoked);
    route.order = uses_count_++;
    route.ready = true;
    return route;
  }

  // A route's kept resources appended to the flat copy that the component search and the max-min
  // read (one array for every route, not a vector of each: the search reads the routes of hundreds
  // of flows per recomputation, 500,000 times for NVLS-Tree on 1,024 GPUs at 1 GB)
  void flatten(Route& route) {
    route.at = static_cast<std::int32_t>(flat_res_.size());
    flat_res_.push_back(static_cast<std::int32_t>(route.res.size()));
    flat_w_.push_back(0.0);
    flat_res_.insert(flat_res_.end(), route.res.begin(), route.res.end());
    flat_w_.insert(flat_w_.end(), route.w.begin(), route.w.end());
  }

  // FluidNetwork._restore
  void restore(std::vector<std::int32_t>& pairs) {
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    std::vector<std::int32_t> none, moved;
    for (std::int32_t q : pairs) {
      Route& route = routes_[q];
      if (!route.ready) continue;
      // the route's flows in flight: all on each resource it kept, which it keeps again (a
      // resource's candidates only shrink), so one resource's list holds them, not every slot
      // (400,000 of them on 1,024 GPUs at 1 MB, scanned thousands of times). It kept one at least:
      // it left a resource out for another of its own, and the least of those is never left out.
      for (std::int32_t s : res_flows_[route.res[0]])
        if (hot_[s].q == q) moved.push_back(s);
      kept(q, route.res, route.w, none);
      flatten(route);
      ++uses_count_;  // (the route is added to the table again, keeping its order)
    }
    std::sort(moved.begin(), moved.end());  // (registered in slot order, as a scan of every slot would)
    for (std::int32_t s : moved) {
      hot_[s].at = routes_[hot_[s].q].at;
      for (std::int32_t rid : routes_[hot_[s].q].res) {
        auto& on = res_flows_[rid];
        if (std::find(on.begin(), on.end(), s) == on.end()) on.push_back(s);
      }
    }
    solved_.clear();
  }

  // -- flows -------------------------------------------------------------------------------------
  std::int32_t new_slot() {
    if (!free_slots_.empty()) {
      std::int32_t s = free_slots_.back();
      free_slots_.pop_back();
      return s;
    }
    flows_.emplace_back();
    hot_.push_back(SlotHot{0, 0, 0, 0});
    return static_cast<std::int32_t>(flows_.size() - 1);
  }

  // FluidNetwork.launch
  void launch(std::int32_t q, double size, double cap, double eff, double after, std::int64_t msg) {
    Route& route = routes_[q].ready ? routes_[q] : route_info(q);
    std::int32_t s = new_slot();
    Flow& f = flows_[s];
    f.id = next_flow_++;
    f.bound = cap >= route.bandwidth ? route.bandwidth : cap;
    hot_[s].q = q;
    hot_[s].at = route.at;
    hot_[s].key = (route.order << 40) | f.id;
    f.remaining = size / eff;
    f.rate = 0.0;
    f.t_last = now_;
    f.alpha_s = route.alpha;
    f.after_s = after;
    f.start_s = now_;
    f.msg = msg;
    f.done_eid = -1;
    f.active = true;
    ++transfers_;
    bool shared = false;
    for (std::int32_t rid : route.res) {
      auto& on = res_flows_[rid];
      on.push_back(s);
      if (on.size() > 1) {
        shared = true;
        if (static_cast<std::int64_t>(on.size()) > max_sharing_) max_sharing_ = static_cast<std::int64_t>(on.size());
      }
    }
    if (shared && in_->contention) {
      joined_.push_back(s);
      mark_dirty(route.res);
      return;
    }
    double rate = in_->contention ? route.alone : route.bandwidth;
    if (cap < rate) rate = cap;
    set_rate(s, rate);
  }

  // FluidNetwork._set_rate
  void set_rate(std::int32_t s, double rate) {
    Flow& f = flows_[s];
    if (f.rate > 0) {
      f.remaining -= f.rate * (now_ - f.t_last);
      if (f.remaining < 0) f.remaining = 0.0;
    }
    f.t_last = now_;
    f.rate = rate;
    if (rate <= 0) {
      f.done_eid = -1;
      return;
    }
    f.done_eid = schedule(f.remaining / rate, kFlowDone, s);
  }

  // FluidNetwork._mark_dirty
  void mark_dirty(const std::vector<std::int32_t>& resources) {
    for (std::int32_t rid : resources) {
      if (!res_[rid].dirty) {
        res_[rid].dirty = 1;
        dirty_.push_back(rid);
      }
    }
    if (!flush_scheduled_) {
      flush_scheduled_ = true;
      schedule(0.0, kFlush, 0);
    }
  }

  // FluidNetwork._flush
  void flush() {
    flush_scheduled_ = false;
    std::vector<std::int32_t> seeds;
    seeds.swap(dirty_);
    for (std::int32_t rid : seeds) res_[rid].dirty = 0;
    std::vector<LeftFlow> left;
    std::vector<std::int32_t> joined;
    left.swap(left_);
    joined.swap(joined_);
    if (!left.empty() && handover(left, joined)) {
      ++handovers_;
      return;
    }
    recompute(seeds);
  }

  // FluidNetwork._handover
  bool handover(const std::vector<LeftFlow>& left, const std::vector<std::int32_t>& joined) {
    if (left.size() != joined.size()) return false;
    // (route, bound) -> the rates of the flows that left it, in order (taken from the end)
    std::unordered_map<std::string, std::vector<double>> rates;
    auto key = [](std::int32_t q, double bound) {
      std::string k(sizeof q + sizeof bound, '\0');
      std::memcpy(&k[0], &q, sizeof q);
      std::memcpy(&k[sizeof q], &bound, sizeof bound);
      return k;
    };
    for (const LeftFlow& l : left) rates[key(l.q, l.bound)].push_back(l.rate);
    std::vector<double> taken;
    for (std::int32_t s : joined) {
      auto it = rates.find(key(hot_[s].q, flows_[s].bound));
      if (it == rates.end() || it->second.empty()) return false;
      taken.push_back(it->second.back());
      it->second.pop_back();
    }
    for (std::size_t i = 0; i < joined.size(); ++i) set_rate(joined[i], taken[i]);
    return true;
  }

  // FluidNetwork._recompute
  void recompute(const std::vector<std::int32_t>& seeds) {
    ++recomputes_;
    std::int64_t mark = ++stamp_;
    std::vector<std::int32_t>& seen = seen_;
    std::vector<std::int32_t>& comp = comp_;
    std::vector<std::int32_t>& todo = todo_;
    seen.clear();
    comp.clear();
    todo.clear();
    for (std::int32_t rid : seeds)
      if (res_seen_[rid] != mark) {
        res_seen_[rid] = mark;
        todo.push_back(rid);
      }
    SlotHot* hot = hot_.data();  // (locals: the stores below cannot move the arrays)
    std::int64_t* res_seen = res_seen_.data();
    const std::int32_t* flat = flat_res_.data();
    while (!todo.empty()) {
      std::int32_t rid = todo.back();
      todo.pop_back();
      seen.push_back(rid);
      for (std::int32_t s : res_flows_[rid]) {
        if (hot[s].mark == mark) continue;
        hot[s].mark = mark;
        comp.push_back(s);
        const std::int32_t* res = flat + hot[s].at;
        for (std::int32_t k = 1, n = res[0]; k <= n; ++k)
          if (std::int32_t other = res[k]; res_seen[other] != mark) {
            res_seen[other] = mark;
            todo.push_back(other);
          }
      }
    }
    if (comp.empty()) return;
    if (comp.size() > 1) {  // by route, then by id (network._ORDER)
      std::vector<std::pair<std::int64_t, std::int32_t>>& keyed = keyed_;
      keyed.resize(comp.size());
      for (std::size_t i = 0; i < comp.size(); ++i) keyed[i] = {hot_[comp[i]].key, comp[i]};
      std::sort(keyed.begin(), keyed.end());
      for (std::size_t i = 0; i < comp.size(); ++i) comp[i] = keyed[i].second;
    }
    std::vector<double> rates;
    if (comp.size() == 1) {
      Flow& f = flows_[comp[0]];
      rates.push_back(alone_rate(f.bound, routes_[hot_[comp[0]].q]));
    } else if (comp.size() > kRememberUpTo) {
      rates = sparse_max_min(comp, seen);
    } else {
      std::string pattern(comp.size() * 16, '\0');
      for (std::size_t i = 0; i < comp.size(); ++i) {
        const Flow& f = flows_[comp[i]];
        std::int64_t order = routes_[hot_[comp[i]].q].order;
        std::memcpy(&pattern[16 * i], &order, 8);
        std::memcpy(&pattern[16 * i + 8], &f.bound, 8);
      }
      auto it = solved_.find(pattern);
      if (it == solved_.end()) {
        if (comp.size() < kNumpyFrom) {
          std::sort(seen.begin(), seen.end());
          rates = dict_max_min(comp, seen);
        } else {
          rates = sparse_max_min(comp, seen);
        }
        solved_flows_ += static_cast<std::int64_t>(comp.size());
        if (solved_flows_ > kSolvedMaxFlows) {
          solved_.clear();
          solved_flows_ = static_cast<std::int64_t>(comp.size());
        }
        solved_.emplace(std::move(pattern), rates);
      } else {
        rates = it->second;
        ++remembered_;
      }
    }
    for (std::size_t i = 0; i < comp.size(); ++i)
      if (rates[i] != flows_[comp[i]].rate) set_rate(comp[i], rates[i]);
  }

  // network._max_min: weighted progressive filling over dicts, resources by id
  std::vector<double> dict_max_min(const std::vector<std::int32_t>& comp, const std::vector<std::int32_t>& resources) {
    for (std::int32_t rid : resources) {
      Resource& r = res_[rid];
      r.residual = capacity(rid, static_cast<std::int64_t>(res_flows_[rid].size()));
      r.weight_sum = 0.0;
    }
    std::unordered_map<std::int32_t, std::vector<std::size_t>> on;  // resource -> flows (positions) on it
    for (std::size_t i = 0; i < comp.size(); ++i) {
      const Route& route = routes_[hot_[comp[i]].q];
      for (std::size_t k = 0; k < route.res.size(); ++k) {
        res_[route.res[k]].weight_sum += route.w[k];
        on[route.res[k]].push_back(i);
      }
    }
    std::vector<double> rates(comp.size(), 0.0);
    std::vector<char> unfrozen(comp.size(), 1);
    std::size_t left = comp.size();
    std::vector<std::size_t> freeze;
    while (left) {
      double level = kInf;
      bool first = true;
      for (std::size_t i = 0; i < comp.size(); ++i)
        if (unfrozen[i]) {
          double b = flows_[comp[i]].bound;
          if (first || b < level) level = b;
          first = false;
        }
      for (std::int32_t rid : resources) {
        const Resource& r = res_[rid];
        if (r.weight_sum > 0) {
          double share = r.residual / r.weight_sum;
          if (share < level) level = share;
        }
      }
      if (0.0 > level) level = 0.0;  // max(level, 0.0)
      double limit = level * (1 + kRelTol);
      freeze.clear();
      for (std::size_t i = 0; i < comp.size(); ++i)
        if (unfrozen[i] && flows_[comp[i]].bound <= limit) freeze.push_back(i);
      for (std::int32_t rid : resources) {
        const Resource& r = res_[rid];
        if (r.weight_sum > 0 && r.residual / r.weight_sum <= limit) {
          auto it = on.find(rid);
          if (it != on.end())
            for (std::size_t i : it->second)
              if (unfrozen[i]) freeze.push_back(i);
        }
      }
      for (std::size_t i : freeze) {
        if (!unfrozen[i]) continue;
        unfrozen[i] = 0;
        --left;
        rates[i] = level;
        const Route& route = routes_[hot_[comp[i]].q];
        for (std::size_t k = 0; k < route.res.size(); ++k) {
          Resource& r = res_[route.res[k]];
          r.residual -= level * route.w[k];
          r.weight_sum -= route.w[k];
          if (r.weight_sum < 1e-12) r.weight_sum = 0.0;
        }
      }
    }
    return rates;
  }

  // network._Sparse.max_min. NumPy sums each resource's weights afresh every round, over the entries
  // in flow order, and subtracts level × (the newly frozen flows' weights summed in flow order) from
  // every residual. A resource none of whose flows froze keeps the same sum and residual bit for bit
  // (the same terms in the same order; minus level × 0.0), so only the touched resources are redone.
  std::vector<double> sparse_max_min(const std::vector<std::int32_t>& comp, const std::vector<std::int32_t>& resources) {
    const std::size_t nf = comp.size(), nr = resources.size();
    for (std::size_t k = 0; k < nr; ++k) res_local_[resources[k]] = static_cast<std::int32_t>(k);
    std::vector<double>& bound = bound_;
    bound.resize(nf);
    for (std::size_t i = 0; i < nf; ++i) bound[i] = flows_[comp[i]].bound;
    // per resource, its entries (flow position, weight) in flow order, and their sum (all unfrozen)
    std::vector<std::int64_t>& off = off_;
    off.assign(nr + 1, 0);
    const std::int32_t* flat = flat_res_.data();
    const double* flat_w = flat_w_.data();
    std::vector<std::int32_t>& at = at_;  // per flow: its route's resources in flat_res_
    at.resize(nf);
    for (std::size_t i = 0; i < nf; ++i) {
      at[i] = hot_[comp[i]].at;
      const std::int32_t* res = flat + at[i];
      for (std::int32_t k = 1; k <= res[0]; ++k) ++off[res_local_[res[k]] + 1];
    }
    for (std::size_t k = 0; k < nr; ++k) off[k + 1] += off[k];
    std::vector<std::int32_t>& entry_flow = entry_flow_;
    std::vector<double>& entry_w = entry_w_;
    entry_flow.resize(off[nr]);
    entry_w.resize(off[nr]);
    std::vector<std::int64_t>& fill = fill_;
    fill.assign(off.begin(), off.end() - 1);
    std::vector<double>&residual = residual_, &weight_sum = weight_sum_, &share = share_, &newly_sum = newly_sum_;
    residual.resize(nr);
    share.resize(nr);
    weight_sum.assign(nr, 0.0);
    newly_sum.assign(nr, 0.0);
    for (std::size_t i = 0; i < nf; ++i) {
      const std::int32_t* res = flat + at[i];
      for (std::int32_t k = 1; k <= res[0]; ++k) {
        std::int32_t local = res_local_[res[k]];
        std::int64_t e = fill[local]++;
        entry_flow[e] = static_cast<std::int32_t>(i);
        entry_w[e] = flat_w[at[i] + k];
        weight_sum[local] += flat_w[at[i] + k];
      }
    }
    std::vector<char>&unfrozen = unfrozen_, &newly = newly_, &touched = touched_;
    unfrozen.assign(nf, 1);
    newly.assign(nf, 0);
    touched.assign(nr, 0);
    auto resum = [&](std::size_t k) {  // the unfrozen entries' weights, in flow order
      double sum = 0.0;
      for (std::int64_t e = off[k]; e < off[k + 1]; ++e)
        if (unfrozen[entry_flow[e]]) sum += entry_w[e];
      weight_sum[k] = sum;
    };
    for (std::size_t k = 0; k < nr; ++k) {
      std::int32_t rid = resources[k];
      residual[k] = in_->res_varies[rid] ? capacity(rid, static_cast<std::int64_t>(res_flows_[rid].size()))
                                         : in_->res_one_flow[rid];
      share[k] = weight_sum[k] > 1e-12 ? residual[k] / weight_sum[k] : kInf;
    }
    std::vector<double> rates(nf, 0.0);
    std::vector<std::int32_t> touched_list;
    // the unfrozen flows, ascending, and the resources whose share is finite: the rounds look at
    // those alone (a frozen flow is never looked at again; a resource whose unfrozen weights sum to
    // nothing keeps an infinite share, which sets no level and freezes no flow that its bound does not)
    std::vector<std::int32_t>& active = active_;
    std::vector<std::int32_t>& live = live_;
    active.resize(nf);
    for (std::size_t i = 0; i < nf; ++i) active[i] = static_cast<std::int32_t>(i);
    live.clear();
    for (std::size_t k = 0; k < nr; ++k)
      if (share[k] < kInf) live.push_back(static_cast<std::int32_t>(k));
    std::size_t left = nf;
    while (left) {
      double bmin = kInf;  // (the minima of exact values: any order gives the same)
      for (std::int32_t i : active) bmin = bound[i] < bmin ? bound[i] : bmin;
      double smin = kInf;
      for (std::int32_t k : live) smin = share[k] < smin ? share[k] : smin;
      double level = bmin < smin ? bmin : smin;  // min(share.min(), bound.min(...))
      if (0.0 > level) level = 0.0;              // max(..., 0.0)
      double limit = level * (1 + kRelTol);
      for (std::int32_t i : active) newly[i] = bound[i] <= limit;
      for (std::int32_t k : live) {
        if (!(share[k] <= limit)) continue;
        for (std::int64_t e = off[k]; e < off[k + 1]; ++e)
          if (entry_w[e] > 0 && unfrozen[entry_flow[e]]) newly[entry_flow[e]] = 1;
      }
      touched_list.clear();
      std::size_t kept = 0;
      for (std::int32_t i : active) {  // in flow order: the order NumPy sums them in
        if (!newly[i]) {
          active[kept++] = i;
          continue;
        }
        newly[i] = 0;
        rates[i] = level;
        unfrozen[i] = 0;
        --left;
        const std::int32_t* res = flat + at[i];
        for (std::int32_t k = 1; k <= res[0]; ++k) {
          std::int32_t local = res_local_[res[k]];
          newly_sum[local] += flat_w[at[i] + k];
          if (!touched[local]) {
            touched[local] = 1;
            touched_list.push_back(local);
          }
        }
      }
      active.resize(kept);
      for (std::int32_t k : touched_list) {
        residual[k] -= level * newly_sum[k];
        newly_sum[k] = 0.0;
        touched[k] = 0;
        if (left) {  // (after the last round, nothing reads them)
          resum(k);
          share[k] = weight_sum[k] > 1e-12 ? residual[k] / weight_sum[k] : kInf;
        }
      }
      kept = 0;
      for (std::int32_t k : live)
        if (share[k] < kInf) live[kept++] = k;
      live.resize(kept);
    }
    return rates;
  }

  // FluidNetwork._complete
  void complete_flow(std::int32_t s) {
    Flow& f = flows_[s];
    f.active = false;
    f.done_eid = -1;
    f.wire_end = now_;
    double rate = f.rate;
    bool others = false;
    const Route& route = routes_[hot_[s].q];
    for (std::int32_t rid : route.res) {
      auto& on = res_flows_[rid];
      auto it = std::find(on.begin(), on.end(), s);
      *it = on.back();
      on.pop_back();
      if (!on.empty()) others = true;
    }
    if (others && in_->contention) {
      left_.push_back(LeftFlow{hot_[s].q, f.bound, rate});
      f.rate = 0.0;
      mark_dirty(route.res);
    } else {
      f.rate = 0.0;
    }
    sent(s);
    Flow& g = flows_[s];  // (sent may have grown the pool)
    double delay = g.alpha_s + g.after_s;
    if (delay > 0)
      schedule(delay, kArrive, s);
    else
      arrive(s);
  }

  // FluidNetwork._arrive, then _Run._landed
  void arrive(std::int32_t s) {
    Flow& f = flows_[s];
    std::int64_t m = f.msg;
    in_->msg_start[m] = f.start_s;
    in_->msg_wire[m] = f.wire_end;
    free_slots_.push_back(s);
    landed_at(now_, 1);
    complete_message(m, now_);
  }

  // -- Algorithm mode ------------------------------------------------------------------------------
  // _Run._sent
  void sent(std::int32_t s) {
    std::int32_t qi = in_->msg_q[flows_[s].msg];
    q_busy_[qi] = 0;
    start_shared(qi);
  }

  // _Run._start_shared
  void start_shared(std::int64_t qi) {
    if (q_busy_[qi]) return;
    std::int64_t head = q_head_[qi];
    if (head >= in_->q_off[qi + 1] - in_->q_off[qi]) return;
    std::int64_t m = in_->q_msg[in_->q_off[qi] + head];
    if (in_->pending[m]) return;
    q_head_[qi] = head + 1;
    q_busy_[qi] = 1;
    double size = in_->msg_size[m], after = in_->msg_after[m];
    double eff = in_->efficiency;
    double cap = in_->msg_reduce[m] ? in_->reduce_cap / eff : kInf;
    after += in_->hop_latency;
    launch(static_cast<std::int32_t>(qi), size, cap, eff, after, m);
  }

  // _delay_to
  static double delay_to(double now, double when) {
    double delay = when - now;
    while (delay > 0 && now + delay > when) delay = std::nextafter(delay, -kInf);
    return delay > 0 ? delay : 0.0;
  }

  // _Run._start_private
  void start_private(std::int64_t qi, double now) {
    std::int64_t base = in_->q_off[qi], end = in_->q_off[qi + 1] - base;
    std::int64_t head = q_head_[qi];
    double free = q_free_[qi];
    double rate = in_->q_good[qi], rate_reduce = in_->q_good_reduce[qi];
    double alpha = in_->q_alpha_hop[qi];
    while (head < end) {
      std::int64_t m = in_->q_msg[base + head];
      if (in_->pending[m]) break;
      ++head;
      double t0 = free > now ? free : now;
      double size = in_->msg_size[m], after = in_->msg_after[m];
      free = t0 + size / (in_->msg_reduce[m] ? rate_reduce : rate);
      in_->msg_start[m] = t0;
      in_->msg_wire[m] = free;
      double done = free + (alpha + after);
      auto it = landings_.find(done);
      if (it == landings_.end()) {
        landings_.emplace(done, std::vector<std::int64_t>{m});
        schedule(delay_to(now_, done), kLandPrivate, 0, done);
      } else {
        it->second.push_back(m);
      }
    }
    q_head_[qi] = head;
    q_free_[qi] = free;
  }

  // _Run._release
  void release(std::int64_t slot, double now) {
    std::int32_t count = in_->arrived[slot] + 1;
    in_->arrived[slot] = count;
    std::int64_t i = in_->cursor[slot], end = in_->slot_end[slot];
    while (i < end && in_->w_landed[i] <= count) {
      std::int64_t w = in_->w_msg[i];
      in_->pending[w] -= 1;
      if (!in_->pending[w]) {
        std::int32_t qi = in_->msg_q[w];
        if (in_->q_fast[qi])
          start_private(qi, now);
        else
          start_shared(qi);
      }
      ++i;
    }
    in_->cursor[slot] = i;
  }

  // _Run._complete
  void complete_message(std::int64_t m, double now) {
    for (std::int64_t k = in_->rel_off[m]; k < in_->rel_off[m + 1]; ++k) release(in_->rel_slot[k], now);
  }

  // _Run._landed_at
  void landed_at(double now, std::int64_t count) {
    landed_count_ += count;
    if (now > last_s_) last_s_ = now;
  }

  // _Run._land_private
  void land_private(double when) {
    if (now_ != when) {
      schedule(when - now_, kLandPrivate, 0, when);
      return;
    }
    auto it = landings_.find(when);
    std::vector<std::int64_t> batch = std::move(it->second);
    landings_.erase(it);
    landed_at(when, static_cast<std::int64_t>(batch.size()));
    for (std::int64_t m : batch) complete_message(m, when);
  }
};

}  // namespace

// Python runs its SIGINT handler only between bytecodes, never during this call: the run installs its
// own, which stops the loop at the next check, and puts Python's back before returning.
extern "C" int sc_run(ScRun* in) {
  struct sigaction ours {}, theirs {};
  if (in->catch_interrupt) {
    g_interrupted = 0;
    ours.sa_handler = on_interrupt;
    sigemptyset(&ours.sa_mask);
    sigaction(SIGINT, &ours, &theirs);
  }
  int rc = 0;
  try {
    in->status = 0;
    Core core(in);
    core.run();
  } catch (...) {
    rc = -1;
  }
  if (in->catch_interrupt) sigaction(SIGINT, &theirs, nullptr);
  return rc;
}
