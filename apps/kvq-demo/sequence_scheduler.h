#pragma once
// Sequences moving through a paged cache, as an engine's scheduler moves them: waiting sequences
// are admitted into a fixed-width batch when a row and enough blocks are free, prefill their
// prompt in one write, then decode one token per step; a sequence that has written all its tokens
// gives its blocks back and its row becomes a hole (a padding slot, -1) until another sequence is
// admitted into it.
//
// Blocks are taken lazily (a page when a sequence's next token starts one), but admission keeps
// enough free blocks for every admitted sequence to reach its full length, so growth never runs
// out (engines preempt instead; the demo has no need to).
//
// The run ends when every sequence has been admitted and the last one has finished: a snapshot of
// a serving engine. Sequences still decoding then are "live at the end"; the others were
// "finished" on the way (the demo checks each one's K/V before its blocks are freed).
#include <cstdint>
#include <vector>

#include "block_allocator.h"
#include "demo_spec.h"

namespace kvq::demo {

struct SequencePlan {
  int64_t prompt_tokens = 0;  // written by one prefill write
  int64_t decode_tokens = 0;  // then one per decode step
  int64_t total() const { return prompt_tokens + decode_tokens; }
};

// `spec.sequences` plans with lengths drawn uniformly from spec's ranges, from `seed`.
std::vector<SequencePlan> plan_sequences(const DemoSpec& spec, uint64_t seed);

enum class SequenceState { waiting, running, finished };

struct Sequence {
  int64_t id = 0;
  SequencePlan plan;
  SequenceState state = SequenceState::waiting;
  int64_t length = 0;                // tokens in the cache
  int64_t row = -1;                  // batch row while running
  std::vector<int64_t> block_table;  // [ceil(length / block_size)] block of each page
  bool complete() const { return length == plan.total(); }
};

// The prompt of one newly admitted sequence: positions [0, prompt_tokens).
struct PrefillWrite {
  int64_t sequence = 0;
  std::vector<int64_t> slots;  // [prompt_tokens]
};

// One decode step: a token for every running sequence, one row per batch row.
struct DecodeWrite {
  std::vector<int64_t> sequence;  // [max_batch] sequence id, -1 for a hole
  std::vector<int64_t> position;  // [max_batch] token position in its sequence, -1 for a hole
  std::vector<int64_t> slots;     // [max_batch] slot = block * block_size + offset, -1 for a hole
  int64_t tokens = 0;             // rows that are not holes
};

// Blocks whose ownership is wrong: allocated but in no running sequence's block table, in more
// than one table, or in a table but free; plus table entries missing or extra for a sequence's
// length (a finished sequence owns none). 0 when every allocated block was freed or is owned by
// exactly one live sequence.
int64_t misowned_blocks(const BlockAllocator& allocator, const std::vector<Sequence>& sequences,
                        int64_t block_size);

class SequenceScheduler {
 public:
  // Throws kvq::Error (invalid_argument) when a plan cannot fit in the cache even alone, or a size
  // is not positive.
  SequenceScheduler(std::vector<SequencePlan> plans, int64_t max_batch, int64_t num_blocks,
                    int64_t block_size);

  // Admits waiting sequences in order while a batch row is free and the blocks each needs for its
  // whole life fit beside what the running ones still need; takes the blocks of their prompts.
  std::vector<PrefillWrite> admit();

  // True when a running sequence still has tokens to decode.
  bool has_decode_work() const;
  // Takes a block for each sequence whose next token starts a page; one token per running one.
  DecodeWrite decode();

  // Running sequences that hold all their tokens, in id order: release() them (after reading
  // their K/V back).
  std::vector<int64_t> complete() const;
  // Gives a running sequence's blocks back and frees its row. Throws kvq::Error for a sequence that
  // is not running.
  void release(int64_t id);

  // Every sequence admitted and the last one finished (see the top of this file).
  bool done() const;

  // The cache slots of a running sequence's tokens 0..length-1.
  std::vector<int64_t> slots_of(int64_t id) const;
  std::vector<int64_t> running() const;  // ids, ascending

  const Sequence& sequence(int64_t id) const { return sequences_.at(static_cast<std::size_t>(id)); }
  int64_t num_sequences() const { return static_cast<int64_t>(sequences_.size()); }
  int64_t num_finished() const { return finished_; }
  int64_t max_batch() const { return static_cast<int64_t>(rows_.size()); }
  int64_t block_size() const { return block_size_; }
  const BlockAllocator& allocator() const { return allocator_; }

  // misowned_blocks() of this scheduler's state: 0 when every allocated block was freed or is
  // owned by exactly one live sequence.
  int64_t blocks_leaked() const { return misowned_blocks(allocator_, sequences_, block_size_); }

  // Blocks needed to hold `tokens` tokens.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

 private:
  int64_t slot_of(const Sequence& s, int64_t position) const;
  int64_t reserved_blocks() const;  // blocks running sequences will still take

  std::vector<Sequence> sequences_;
  std::vector<int64_t> rows_;  // [max_batch] running sequence id, -1 = free
  BlockAllocator allocator_;
  int64_t block_size_;
  int64_t next_waiting_ = 0;  // sequences are admitted in id order
  int64_t finished_ = 0;
};

}  // namespace kvq::demo
