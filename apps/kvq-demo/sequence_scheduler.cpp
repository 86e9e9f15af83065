#include "sequence_scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "kvq/core/status.h"
#include "random.h"

namespace kvq::demo {

std::vector<SequencePlan> plan_sequences(const DemoSpec& spec, uint64_t seed) {
  Rng rng(mix(seed, 0x706c616e /* "plan" */));
  std::vector<SequencePlan> plans(static_cast<std::size_t>(spec.sequences));
  for (auto& p : plans) {
    p.prompt_tokens = rng.integer(spec.prompt_tokens[0], spec.prompt_tokens[1]);
    p.decode_tokens = rng.integer(spec.decode_tokens[0], spec.decode_tokens[1]);
  }
  return plans;
}

SequenceScheduler::SequenceScheduler(std::vector<SequencePlan> plans, int64_t max_batch,
                                     int64_t num_blocks, int64_t block_size)
    : allocator_(num_blocks), block_size_(block_size) {
  if (max_batch < 1 || block_size < 1) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("scheduler: max_batch = {}, block_size = {}: expected both >= 1",
                            max_batch, block_size));
  }
  rows_.assign(static_cast<std::size_t>(max_batch), -1);
  sequences_.reserve(plans.size());
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const SequencePlan& p = plans[i];
    if (p.prompt_tokens < 1 || p.decode_tokens < 0) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("scheduler: sequence {}: prompt {} and decode {} tokens: expected "
                              "prompt >= 1 and decode >= 0",
                              i, p.prompt_tokens, p.decode_tokens));
    }
    if (blocks_for(p.total()) > num_blocks) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("scheduler: sequence {} needs {} blocks for {} tokens, the cache "
                              "has {}",
                              i, blocks_for(p.total()), p.total(), num_blocks));
    }
    Sequence s;
    s.id = static_cast<int64_t>(i);
    s.plan = p;
    sequences_.push_back(std::move(s));
  }
}

int64_t SequenceScheduler::reserved_blocks() const {
  int64_t reserved = 0;
  for (int64_t id : rows_) {
    if (id < 0) continue;
    const Sequence& s = sequence(id);
    reserved += blocks_for(s.plan.total()) - static_cast<int64_t>(s.block_table.size());
  }
  return reserved;
}

int64_t SequenceScheduler::slot_of(const Sequence& s, int64_t position) const {
  return s.block_table[static_cast<std::size_t>(position / block_size_)] * block_size_ +
         position % block_size_;
}

std::vector<PrefillWrite> SequenceScheduler::admit() {
  std::vector<PrefillWrite> writes;
  while (next_waiting_ < num_sequences()) {
    Sequence& s = sequences_[static_cast<std::size_t>(next_waiting_)];
    std::size_t row = 0;
    while (row < rows_.size() && rows_[row] >= 0) ++row;
    if (row == rows_.size()) break;
    if (allocator_.num_free() - reserved_blocks() < blocks_for(s.plan.total())) break;
    rows_[row] = s.id;
    s.row = static_cast<int64_t>(row);
    s.state = SequenceState::running;
    for (int64_t b = 0; b < blocks_for(s.plan.prompt_tokens); ++b) {
      s.block_table.push_back(allocator_.allocate());
    }
    s.length = s.plan.prompt_tokens;
    PrefillWrite w;
    w.sequence = s.id;
    w.slots.resize(static_cast<std::size_t>(s.length));
    for (int64_t t = 0; t < s.length; ++t) w.slots[static_cast<std::size_t>(t)] = slot_of(s, t);
    writes.push_back(std::move(w));
    ++next_waiting_;
  }
  return writes;
}

bool SequenceScheduler::has_decode_work() const {
  for (int64_t id : rows_) {
    if (id >= 0 && !sequence(id).complete()) return true;
  }
  return false;
}

DecodeWrite SequenceScheduler::decode() {
  DecodeWrite w;
  const std::size_t n = rows_.size();
  w.sequence.assign(n, -1);
  w.position.assign(n, -1);
  w.slots.assign(n, -1);
  for (std::size_t r = 0; r < n; ++r) {
    if (rows_[r] < 0) continue;
    Sequence& s = sequences_[static_cast<std::size_t>(rows_[r])];
    if (s.complete()) continue;
    if (s.length == static_cast<int64_t>(s.block_table.size()) * block_size_) {
      s.block_table.push_back(allocator_.allocate());  // the admission reserve guarantees one
    }
    w.sequence[r] = s.id;
    w.position[r] = s.length;
    w.slots[r] = slot_of(s, s.length);
    ++s.length;
    ++w.tokens;
  }
  return w;
}

std::vector<int64_t> SequenceScheduler::complete() const {
  std::vector<int64_t> ids;
  for (int64_t id : running()) {
    if (sequence(id).complete()) ids.push_back(id);
  }
  return ids;
}

void SequenceScheduler::release(int64_t id) {
  if (id < 0 || id >= num_sequences() || sequence(id).state != SequenceState::running) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("scheduler: release({}): not a running sequence", id));
  }
  Sequence& s = sequences_[static_cast<std::size_t>(id)];
  for (int64_t b : s.block_table) allocator_.release(b);
  s.block_table.clear();
  rows_[static_cast<std::size_t>(s.row)] = -1;
  s.row = -1;
  s.state = SequenceState::finished;
  ++finished_;
}

bool SequenceScheduler::done() const {
  return num_sequences() == 0 || sequences_.back().state == SequenceState::finished;
}

std::vector<int64_t> SequenceScheduler::slots_of(int64_t id) const {
  const Sequence& s = sequence(id);
  std::vector<int64_t> slots(static_cast<std::size_t>(s.length));
  for (int64_t t = 0; t < s.length; ++t) slots[static_cast<std::size_t>(t)] = slot_of(s, t);
  return slots;
}

std::vector<int64_t> SequenceScheduler::running() const {
  // From the batch rows, not all sequences: this is called after every write.
  std::vector<int64_t> ids;
  for (int64_t id : rows_) {
    if (id >= 0) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

int64_t misowned_blocks(const BlockAllocator& allocator, const std::vector<Sequence>& sequences,
                        int64_t block_size) {
  std::vector<int64_t> owners(static_cast<std::size_t>(allocator.num_blocks()), 0);
  int64_t bad = 0;
  for (const Sequence& s : sequences) {
    const auto pages = static_cast<int64_t>(s.block_table.size());
    const int64_t expected =
        s.state == SequenceState::running ? (s.length + block_size - 1) / block_size : 0;
    bad += pages > expected ? pages - expected : expected - pages;
    for (int64_t b : s.block_table) {
      if (b < 0 || b >= allocator.num_blocks()) {
        ++bad;
        continue;
      }
      ++owners[static_cast<std::size_t>(b)];
    }
  }
  for (int64_t b = 0; b < allocator.num_blocks(); ++b) {
    const int64_t o = owners[static_cast<std::size_t>(b)];
    if (allocator.is_allocated(b)) {
      bad += o == 0 ? 1 : o - 1;  // leaked, or shared by several sequences
    } else {
      bad += o;  // owned but free: a use after free
    }
  }
  return bad;
}

}  // namespace kvq::demo
