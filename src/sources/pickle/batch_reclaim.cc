// DocumentBuilder::Reclaim: what a ListSink's consumed batch leaves behind (document_builder.h).
#include "sources/pickle/document_builder.h"

namespace vramscope::pickle {

void DocumentBuilder::Reclaim(std::span<const Value> consumed) {
  const uint64_t first = batch_.containers;
  const uint64_t end = doc_.containers_.size();
  if (end == first) return;
  for (uint64_t id = first; id < end; ++id) {
    if (doc_.containers_[id].has_runs) {
      // Pending runs: keep it simple, keep everything; the consumed items are retired all the
      // same, as when they are reclaimed.
      RetireConsumed(batch_.memo, consumed);
      return;
    }
  }
  // 0: drop; 1: keep (shared); 2: a consumed item (dropped); 3: a consumed item that something
  // kept refers to (kept). The memo slots of a consumed item are retired either way: a record
  // is never read back once consumed, whatever else refers to it, so a reader's verdict does not
  // depend on what the memo happened to keep (ParseOptions::drop_unread_memo).
  std::vector<uint8_t> state(end - first, 0);
  auto is_new = [&](Value v) {
    return v.tag() == Value::kTagContainer && v.payload() >= first && v.payload() < end;
  };
  for (const Value v : consumed) {
    if (is_new(v)) state[v.payload() - first] = 2;
  }
  std::vector<uint64_t> work;
  auto keep = [&](Value v) {
    if (!is_new(v)) return;
    uint8_t& s = state[v.payload() - first];
    if (s == 1 || s == 3) return;
    s = s == 2 ? 3 : 1;
    work.push_back(v.payload());
  };
  for (uint64_t i = batch_.memo; i < memo_.size(); ++i) {
    if (is_new(memo_[i]) && state[memo_[i].payload() - first] == 0) keep(memo_[i]);
  }
  // What the VM stack holds below the batch's items stays reachable: a batch whose MARK another
  // opcode closed ends at a later APPENDS, with containers made since on the stack (found by the
  // fuzzer once unread memo slots stopped keeping them).
  for (const Value* v = stack_.data(); v < consumed.data(); ++v) keep(*v);
  for (const auto& [index, v] : sparse_memo_) {
    if (is_new(v) && state[v.payload() - first] == 0) keep(v);
  }
  while (!work.empty()) {  // what kept containers refer to is kept too
    const Document::Container c = doc_.containers_[work.back()];
    work.pop_back();
    for (uint64_t i = 0; i < c.size; ++i) keep(doc_.items_[c.begin + i]);
  }
  // Move the kept containers down, in order, re-pointing what refers to them.
  std::vector<std::pair<uint64_t, uint64_t>> moved;
  std::vector<uint64_t> new_id(end - first, UINT64_MAX);
  for (uint64_t id = first; id < end; ++id) {
    if (state[id - first] == 1 || state[id - first] == 3) {
      new_id[id - first] = first + moved.size();
      moved.emplace_back(id, first + moved.size());
    }
  }
  auto remap = [&](Value v) {
    if (!is_new(v)) return v;
    const uint64_t n = new_id[v.payload() - first];
    return n == UINT64_MAX ? Value(Value::kConsumedBits) : Value((n << 3) | Value::kTagContainer);
  };
  auto remap_memo = [&](Value v) {
    const bool was_consumed = is_new(v) && state[v.payload() - first] >= 2;
    return was_consumed ? Value(Value::kConsumedBits) : remap(v);
  };
  std::vector<Document::Container> kept;
  std::vector<Value> kept_items;
  for (const auto& [old_id, unused] : moved) {
    Document::Container c = doc_.containers_[old_id];
    const uint64_t begin = kept_items.size();
    for (uint64_t i = 0; i < c.size; ++i) kept_items.push_back(remap(doc_.items_[c.begin + i]));
    c.begin = batch_.items + begin;
    kept.push_back(c);
  }
  doc_.containers_.resize(first);
  doc_.containers_.insert(doc_.containers_.end(), kept.begin(), kept.end());
  doc_.items_.resize(batch_.items);
  doc_.items_.insert(doc_.items_.end(), kept_items.begin(), kept_items.end());
  for (uint64_t i = batch_.memo; i < memo_.size(); ++i) memo_[i] = remap_memo(memo_[i]);
  for (auto& [index, v] : sparse_memo_) v = remap_memo(v);
  // The stack below the batch's items holds only kept containers (kept above): re-pointed to
  // where they moved.
  for (Value* v = stack_.data(); v < stack_.data() + (consumed.data() - stack_.data()); ++v) {
    *v = remap(*v);
  }
  std::erase_if(incomplete_, [&](uint64_t& id) {
    if (id < first || id >= end) return false;
    if (new_id[id - first] == UINT64_MAX) return true;
    id = new_id[id - first];
    return false;
  });
  ++reclaimed_batches_;
  sink_->Reclaimed(first, moved);
}

}  // namespace vramscope::pickle
