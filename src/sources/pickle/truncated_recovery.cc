// DocumentBuilder::Recover and its helpers: a pickle cut off before STOP
// (ParseOptions::recover_truncated; document_builder.h).
#include "sources/pickle/document_builder.h"

namespace vramscope::pickle {

// The input ended at `cut_at` before STOP (ParseOptions::recover_truncated). Closes every open
// MARK from the innermost out with the opcode that would have closed it, as the writer would
// have: the items of a list (or set) are appended to it, the pairs of a dict set into it (a key
// without its value dropped), anything else becomes a tuple. Each container closed so is marked
// incomplete, and an incomplete dict or tuple that is an item of a list is left out of it.
// The values from `from` up are a dict's pairs, but for what the cut left pending: a list that
// is a value followed by a container is the list's single APPEND the cut came before (Python
// writes a one-item list as `list item APPEND`, no MARK); a key without its value is dropped.
bool DocumentBuilder::SettlePairs(size_t from, uint64_t cut_at) {
  while ((stack_.size() - from) % 2 != 0) {
    const size_t n = stack_.size();
    const Value last = stack_[n - 1];
    const Kind kind = ContainerKind(last);
    if (n - from >= 2 && kind != Kind::kMissing && ContainerKind(stack_[n - 2]) == Kind::kList) {
      if (!PendingAppend(cut_at)) return false;
      continue;
    }
    stack_.pop_back();
  }
  return true;
}

// The top two values are a list and the one item Python was appending to it when the cut came
// (`list item APPEND`): appended as APPEND would (a list the sink streams gets it through the
// sink), unless the item is a record cut short.
bool DocumentBuilder::PendingAppend(uint64_t cut_at) {
  const Value item = stack_.back();
  const Kind kind = ContainerKind(item);
  if ((kind == Kind::kDict || kind == Kind::kTuple) && IncompleteId(item)) {
    ++dropped_records_;
    stack_.pop_back();
  } else {
    if (!Close(kAppend, cut_at)) return false;
  }
  MarkIncomplete(stack_.back());
  return true;
}

// The items from `from` up are a list's, but for what the cut left pending: Python's list items
// are of one kind in a snapshot (all records, or all lists), so a last item of another kind than
// the first, after a list, is that list's single APPEND the cut came before.
bool DocumentBuilder::SettleItems(size_t from, uint64_t cut_at) {
  while (stack_.size() - from >= 2) {
    const size_t n = stack_.size();
    const Kind last = ContainerKind(stack_[n - 1]);
    if (last == Kind::kMissing || ContainerKind(stack_[n - 2]) != Kind::kList ||
        last == ContainerKind(stack_[from])) {
      break;
    }
    if (!PendingAppend(cut_at)) return false;
  }
  return true;
}

bool DocumentBuilder::Recover(uint64_t cut_at, ParseInfo* info) {
  error_ = Status::Ok();
  eof_ = false;
  if (sink_ != nullptr) sink_->Recovering();
  uint64_t closed = 0;
  // The value pushed last, if an empty container, may be one whose contents never came.
  if (!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back()) &&
      stack_.back().tag() == Value::kTagContainer &&
      doc_.containers_[stack_.back().payload()].size == 0 &&
      !doc_.containers_[stack_.back().payload()].has_runs) {
    MarkIncomplete(stack_.back());
  }
  auto drop_unfinished_records = [&](size_t from) {
    size_t out = from;
    for (size_t i = from; i < stack_.size(); ++i) {
      const Value v = stack_[i];
      const Kind k = ContainerKind(v);
      if ((k == Kind::kDict || k == Kind::kTuple) && IncompleteId(v)) {
        ++dropped_records_;
        continue;
      }
      stack_[out++] = v;
    }
    stack_.resize(out);
  };
  while (!marks_.empty()) {
    const size_t mark = marks_.back();
    const size_t below = marks_.size() >= 2 ? marks_[marks_.size() - 2] : 0;
    // The target of an APPENDS/SETITEMS is the value right below the MARK, in the region of the
    // MARK below (two MARKs in a row open a tuple or list of their own).
    const bool has_target = mark > below || (marks_.size() == 1 && mark > 0);
    const Kind target = has_target ? ContainerKind(stack_[mark - 1]) : Kind::kMissing;
    uint8_t op = kTuple;
    if (target == Kind::kList || target == Kind::kSet) {
      if (!SettleItems(mark, cut_at)) return false;
      drop_unfinished_records(mark);
      op = target == Kind::kList ? kAppends : kAddItems;
    } else if (target == Kind::kDict) {
      if (!SettlePairs(mark, cut_at)) return false;
      op = kSetItems;
    }
    if (!Close(op, cut_at)) return false;
    MarkIncomplete(stack_.back());
    ++closed;
  }
  // What a single SETITEM or APPEND of the root would have taken.
  if (stack_.size() > 1) {
    const Kind root = ContainerKind(stack_[0]);
    if (root == Kind::kDict) {
      if (!SettlePairs(1, cut_at)) return false;
      if (stack_.size() > 1) {
        if (!Extend(cut_at, stack_[0], Kind::kDict, stack_.data() + 1, stack_.size() - 1,
                    "SETITEM")) {
          return false;
        }
      }
    } else if (root == Kind::kList) {
      if (!SettleItems(1, cut_at)) return false;
      drop_unfinished_records(1);
      if (stack_.size() > 1 &&
          !Extend(cut_at, stack_[0], Kind::kList, stack_.data() + 1, stack_.size() - 1, "APPEND")) {
        return false;
      }
    }
    stack_.resize(1);
  }
  if (stack_.empty()) {
    return Fail(cut_at, fmt::format("the file is truncated at byte {}, before the pickle holds any "
                                    "value: it was cut off while being written (a job killed, a "
                                    "disk full); write it again",
                                    in_.size()));
  }
  MarkIncomplete(stack_[0]);
  doc_.root_ = stack_[0];
  if (info != nullptr) {
    info->truncated = true;
    info->cut_at = in_.size();  // where the file ends (`cut_at` is where reading stopped)
    info->closed_containers = closed;
    info->dropped_records = dropped_records_;
  }
  return true;
}

}  // namespace vramscope::pickle
