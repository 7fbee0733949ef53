#include "wam/trace.h"

#include <algorithm>
#include <atomic>

namespace wam {
namespace {

// A small stable index per OS thread: the worker's thread track.
uint32_t thread_index() {
  static std::atomic<uint32_t> next{1};
  thread_local const uint32_t index = next.fetch_add(1);
  return index;
}

// Keeps elements 0, 2, 4...: the recorded ones of a doubled stride. Element 0 stays where it is:
// moved onto itself, a named slice's string would be emptied.
template <class T>
void keep_every_other(std::vector<T>& values) {
  for (size_t k = 1; 2 * k < values.size(); ++k) values[k] = std::move(values[2 * k]);
  values.resize((values.size() + 1) / 2);
}

int64_t micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

// A stage-given name as it goes into the trace: printable ASCII (the JSON dump stays valid and
// each escaped character at most 2 bytes), at most `limit` bytes.
std::string trace_name(const std::string& name, size_t limit) {
  std::string out = name.substr(0, limit);
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

// Stage tracks' thread ids under their node, apart from the workers' small ones.
constexpr uint32_t kStageTrackTid = 1u << 30;

}  // namespace

TraceRecorder::TraceRecorder(std::vector<std::string> node_ids, std::vector<std::string> node_types,
                             Clock::time_point start, TraceOptions options)
    : ids_(std::move(node_ids)),
      types_(std::move(node_types)),
      start_(start),
      options_(options),
      last_out_(ids_.size(), 0) {
  options_.max_slices_per_node = std::max<size_t>(2, options_.max_slices_per_node);
  options_.max_counter_points = std::max<size_t>(2, options_.max_counter_points);
  for (size_t i = 0; i < ids_.size(); ++i) tracks_.push_back(std::make_unique<NodeTrack>());
}

void TraceRecorder::slice(size_t node, Clock::time_point begin, Clock::time_point end, uint64_t seq,
                          int64_t step) {
  NodeTrack& track = *tracks_.at(node);
  const uint32_t thread = thread_index();
  std::lock_guard<std::mutex> lock(track.mutex);
  if (track.seen++ % track.stride != 0) return;
  track.slices.push_back(
      {micros(begin - start_), std::max<int64_t>(micros(end - begin), 1), thread, seq, step});
  if (track.slices.size() >= options_.max_slices_per_node) {
    keep_every_other(track.slices);
    track.stride *= 2;
  }
}

void TraceRecorder::stage_slice(size_t node, const std::string& track, const std::string& name,
                                Clock::time_point begin, Clock::duration duration) {
  NodeTrack& node_track = *tracks_.at(node);
  const std::string track_name = trace_name(track, kMaxNameBytes);
  std::lock_guard<std::mutex> lock(node_track.mutex);
  auto it = std::find_if(node_track.stage_tracks.begin(), node_track.stage_tracks.end(),
                         [&](const StageTrack& t) { return t.name == track_name; });
  if (it == node_track.stage_tracks.end()) {
    if (node_track.stage_tracks.size() >= kMaxStageTracks) {
      ++node_track.stage_slices_dropped;
      return;
    }
    node_track.stage_tracks.push_back({track_name, {}, 0, 1});
    it = node_track.stage_tracks.end() - 1;
  }
  StageTrack& stage_track = *it;
  if (stage_track.seen++ % stage_track.stride != 0) return;
  stage_track.slices.push_back({micros(begin - start_), std::max<int64_t>(micros(duration), 1),
                                trace_name(name, kMaxNameBytes)});
  if (stage_track.slices.size() >= options_.max_slices_per_node) {
    keep_every_other(stage_track.slices);
    stage_track.stride *= 2;
  }
}

void TraceRecorder::counters(const RunSnapshot& now) {
  CounterPoint point;
  point.t_us = now.elapsed_s * 1e6;
  const double interval = now.elapsed_s - last_t_;
  for (size_t i = 0; i < now.nodes.size() && i < ids_.size(); ++i) {
    point.queued.push_back(now.nodes[i].queued);
    point.active.push_back(now.nodes[i].active);
    point.rate.push_back(interval > 0 ? double(now.nodes[i].out - last_out_[i]) / interval : 0.0);
    last_out_[i] = now.nodes[i].out;
  }
  last_t_ = now.elapsed_s;
  if (points_seen_++ % point_stride_ != 0) return;
  points_.push_back(std::move(point));
  if (points_.size() >= options_.max_counter_points) {
    keep_every_other(points_);
    point_stride_ *= 2;
  }
}

size_t TraceRecorder::slices_seen(size_t node) const {
  std::lock_guard<std::mutex> lock(tracks_.at(node)->mutex);
  return tracks_[node]->seen;
}

nlohmann::json TraceRecorder::to_json() const {
  using nlohmann::json;
  json events = json::array();
  for (size_t i = 0; i < ids_.size(); ++i) {
    const int pid = static_cast<int>(i) + 1;
    events.push_back({{"ph", "M"},
                      {"pid", pid},
                      {"name", "process_name"},
                      {"args", {{"name", ids_[i] + ": " + types_[i]}}}});
    events.push_back({{"ph", "M"},
                      {"pid", pid},
                      {"name", "process_sort_index"},
                      {"args", {{"sort_index", pid}}}});
    const NodeTrack& track = *tracks_[i];
    std::lock_guard<std::mutex> lock(track.mutex);
    std::vector<uint32_t> threads;
    for (const auto& s : track.slices) {
      if (std::find(threads.begin(), threads.end(), s.thread) == threads.end()) {
        threads.push_back(s.thread);
      }
      json args = {{"seq", s.seq}};
      if (s.step > 0) args["step"] = s.step;
      events.push_back({{"ph", "X"},
                        {"pid", pid},
                        {"tid", s.thread},
                        {"ts", s.begin_us},
                        {"dur", s.dur_us},
                        {"name", s.step > 0 ? "step " + std::to_string(s.step) : types_[i]},
                        {"args", std::move(args)}});
    }
    for (uint32_t thread : threads) {
      events.push_back({{"ph", "M"},
                        {"pid", pid},
                        {"tid", thread},
                        {"name", "thread_name"},
                        {"args", {{"name", "worker " + std::to_string(thread)}}}});
    }
    for (size_t k = 0; k < track.stage_tracks.size(); ++k) {
      const StageTrack& stage_track = track.stage_tracks[k];
      const uint32_t tid = kStageTrackTid + static_cast<uint32_t>(k);
      events.push_back({{"ph", "M"},
                        {"pid", pid},
                        {"tid", tid},
                        {"name", "thread_name"},
                        {"args", {{"name", stage_track.name}}}});
      for (const auto& s : stage_track.slices) {
        events.push_back({{"ph", "X"},
                          {"pid", pid},
                          {"tid", tid},
                          {"ts", s.begin_us},
                          {"dur", s.dur_us},
                          {"name", s.name}});
      }
    }
  }
  for (const auto& point : points_) {
    for (size_t i = 0; i < point.queued.size(); ++i) {
      const int pid = static_cast<int>(i) + 1;
      events.push_back({{"ph", "C"},
                        {"pid", pid},
                        {"ts", point.t_us},
                        {"name", "queue depth"},
                        {"args", {{"queued", point.queued[i]}}}});
      events.push_back({{"ph", "C"},
                        {"pid", pid},
                        {"ts", point.t_us},
                        {"name", "in flight"},
                        {"args", {{"active", point.active[i]}}}});
      events.push_back({{"ph", "C"},
                        {"pid", pid},
                        {"ts", point.t_us},
                        {"name", "items/s"},
                        {"args", {{"rate", point.rate[i]}}}});
    }
  }
  // Slices seen (recorded or thinned out) per node and per stage track, and those dropped for
  // coming on a track name past kMaxStageTracks.
  json seen = json::object(), stage_seen = json::object(), stage_dropped = json::object();
  for (size_t i = 0; i < ids_.size(); ++i) {
    const NodeTrack& track = *tracks_[i];
    std::lock_guard<std::mutex> lock(track.mutex);
    seen[ids_[i]] = track.seen;
    for (const auto& stage_track : track.stage_tracks) {
      stage_seen[ids_[i]][stage_track.name] = stage_track.seen;
    }
    if (track.stage_slices_dropped > 0) stage_dropped[ids_[i]] = track.stage_slices_dropped;
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"generator", "wam-pipeline"},
            {"slices_seen", std::move(seen)},
            {"stage_slices_seen", std::move(stage_seen)},
            {"stage_slices_dropped", std::move(stage_dropped)}}}};
}

size_t TraceRecorder::size_bound(size_t nodes, const TraceOptions& options) {
  // Per node: 2 metadata events, its slices, a thread name per worker (at most one per slice),
  // its stage tracks' names and slices, and 3 counters per point; plus the envelope.
  const size_t per_node = 2 + 2 * options.max_slices_per_node +
                          kMaxStageTracks * (1 + options.max_slices_per_node) +
                          3 * options.max_counter_points;
  return nodes * per_node * kMaxEventBytes + 4096 + nodes * (256 + 3 * kMaxStageTracks * 128);
}

}  // namespace wam
