// The converter's segments, blocks, trace entries, allocator settings and annotations.
#include "sources/snapshot/snapshot_converter.h"

namespace vramscope::snapshot::converter {

Status Converter::ConvertBlock(Value block, const Path& where, uint64_t address, model::Block* out,
                               BlockOrigin* origin) {
  RETURN_IF_ERROR(RequireDict(block, where));
  RETURN_IF_ERROR(Claim(block, where, "block"));
  RETURN_IF_ERROR(RequireU64(block, where, "size", kBytes, &out->size));
  const Value state = doc_->Get(block, "state");
  const auto state_text = doc_->AsString(state);
  if (!state_text) {
    if (doc_->IsMissing(state)) return InvalidInput(where.ToString() + ": missing 'state'");
    return TypeError(where, "state", state, "a str");
  }
  if (*state_text == "active_allocated") {
    out->state = model::BlockState::kActiveAllocated;
  } else if (*state_text == "active_pending_free" || *state_text == "active_awaiting_free") {
    out->state = model::BlockState::kActivePendingFree;
  } else if (*state_text == "inactive") {
    out->state = model::BlockState::kInactive;
  } else {
    return InvalidInput(
        fmt::format("{}: unknown block state '{}'", where.ToString(), ForMessage(*state_text, 40)));
  }
  // 2.1+ blocks carry their address; older ones tile the segment from its start.
  RETURN_IF_ERROR(GetU64(block, where, "address", kAddress, address, &out->address));
  RETURN_IF_ERROR(GetU64(block, where, "requested_size", kBytes, 0, &out->requested_size));
  origin->has_requested_size = Has(block, "requested_size");
  const Value history = doc_->Get(block, "history");
  if (!doc_->IsMissing(history) && !doc_->IsNone(history)) {
    // 1.13/2.0: the allocations this block has held, oldest first; the last is the current one.
    history_blocks_ = true;
    const Path p = where.Key("history");
    RETURN_IF_ERROR(RequireList(history, p));
    const auto records = doc_->Items(history);
    if (!records.empty() && model::IsActive(out->state)) {
      const Value last = records.back();
      const Path lp = p.Index(static_cast<int64_t>(records.size() - 1));
      RETURN_IF_ERROR(RequireDict(last, lp));
      if (out->requested_size == 0) {
        RETURN_IF_ERROR(GetU64(last, lp, "real_size", kBytes, 0, &out->requested_size));
        origin->has_requested_size = false;  // not the value PyTorch summed for the segment
      }
      RETURN_IF_ERROR(
          ConvertStack(doc_->Get(last, "frames"), doc_->Get(last, "cpp_frames"), lp, &out->stack));
    }
  } else {
    RETURN_IF_ERROR(ConvertStack(doc_->Get(block, "frames"), Value(), where, &out->stack));
  }
  return Status::Ok();
}

Status Converter::ConvertSegments(Value segments, const Path& where) {
  RETURN_IF_ERROR(RequireList(segments, where));
  const auto items = doc_->Items(segments);
  struct Pending {
    model::Segment segment;
    SegmentOrigin origin;
    std::vector<std::pair<model::Block, BlockOrigin>> blocks;
  };
  std::vector<Pending> pending(items.size());
  for (size_t s = 0; s < items.size(); ++s) {
    const Path sp = where.Index(static_cast<int64_t>(s));
    const Value seg = items[s];
    RETURN_IF_ERROR(RequireDict(seg, sp));
    RETURN_IF_ERROR(Claim(seg, sp, "segment"));
    model::Segment& out = pending[s].segment;
    pending[s].origin.index = static_cast<uint32_t>(s);
    uint64_t device = 0;
    RETURN_IF_ERROR(GetU64(seg, sp, "device", kOrdinal, 0, &device));
    out.device = static_cast<int32_t>(device);
    RETURN_IF_ERROR(RequireU64(seg, sp, "address", kAddress, &out.address));
    RETURN_IF_ERROR(RequireU64(seg, sp, "total_size", kBytes, &out.total_size));
    RETURN_IF_ERROR(GetU64(seg, sp, "allocated_size", kBytes, 0, &out.allocated_size));
    RETURN_IF_ERROR(GetU64(seg, sp, "active_size", kBytes, 0, &out.active_size));
    RETURN_IF_ERROR(GetU64(seg, sp, "requested_size", kBytes, 0, &out.requested_size));
    pending[s].origin.has_allocated_size = Has(seg, "allocated_size");
    pending[s].origin.has_active_size = Has(seg, "active_size");
    pending[s].origin.has_requested_size = Has(seg, "requested_size");
    RETURN_IF_ERROR(GetU64(seg, sp, "stream", kStream, 0, &out.stream));
    const Value type = doc_->Get(seg, "segment_type");
    if (const auto t = doc_->AsString(type)) {
      out.pool = *t == "small" ? model::Pool::kSmall : model::Pool::kLarge;
    } else if (!doc_->IsMissing(type)) {
      return TypeError(sp, "segment_type", type, "a str");
    }
    const Value pool_id = doc_->Get(seg, "segment_pool_id");
    if (!doc_->IsMissing(pool_id) && !doc_->IsNone(pool_id)) {
      const auto ids = doc_->Items(pool_id);
      // PyTorch's pool ids are unsigned (CaptureId_t): one past INT64_MAX keeps its identity
      // as the same 64 bits rather than falling into the default pool.
      for (size_t k = 0; k < ids.size() && k < 2; ++k) {
        const auto u = doc_->AsUint64(ids[k]);
        out.pool_id[k] = u ? static_cast<int64_t>(*u) : doc_->AsInt64(ids[k]).value_or(0);
      }
    }
    if (const auto e = doc_->AsBool(doc_->Get(seg, "is_expandable"))) out.is_expandable = *e;
    const Value frames = doc_->Get(seg, "frames");
    if (!doc_->IsMissing(frames)) segment_frames_ = true;
    RETURN_IF_ERROR(ConvertStack(frames, Value(), sp, &out.stack));

    const Value blocks = doc_->Get(seg, "blocks");
    const Path bp = sp.Key("blocks");
    if (doc_->IsMissing(blocks)) return InvalidInput(sp.ToString() + ": missing 'blocks'");
    RETURN_IF_ERROR(RequireList(blocks, bp));
    uint64_t next_address = out.address;
    for (size_t b = 0; b < doc_->Items(blocks).size(); ++b) {
      model::Block block;
      BlockOrigin origin{static_cast<uint32_t>(b)};
      RETURN_IF_ERROR(ConvertBlock(doc_->Items(blocks)[b], bp.Index(static_cast<int64_t>(b)),
                                   next_address, &block, &origin));
      next_address = block.address + block.size;
      pending[s].blocks.emplace_back(block, origin);
    }
    std::stable_sort(
        pending[s].blocks.begin(), pending[s].blocks.end(),
        [](const auto& x, const auto& y) { return x.first.address < y.first.address; });
  }
  std::stable_sort(pending.begin(), pending.end(), [](const Pending& x, const Pending& y) {
    return std::tie(x.segment.device, x.segment.address) <
           std::tie(y.segment.device, y.segment.address);
  });
  std::vector<SegmentOrigin> segment_origins;
  std::vector<BlockOrigin> block_origins;
  segment_origins.reserve(pending.size());
  for (Pending& p : pending) {
    p.segment.first_block = static_cast<uint32_t>(trace_.blocks.size());
    p.segment.block_count = static_cast<uint32_t>(p.blocks.size());
    for (auto& [b, origin] : p.blocks) {
      b.segment = static_cast<uint32_t>(trace_.segments.size());
      trace_.blocks.push_back(b);
      block_origins.push_back(origin);
    }
    trace_.segments.push_back(p.segment);
    segment_origins.push_back(p.origin);
  }
  // The allocator-state invariants (segment_invariants.h): a file PyTorch wrote holds them all.
  if (const auto v = FindSegmentViolation(trace_, segment_origins, block_origins)) {
    const Path sp = where.Index(v->segment);
    const std::string path =
        v->block ? sp.Key("blocks").Index(*v->block).ToString() : sp.ToString();
    return InvalidInput(fmt::format("{}: {}; {}", path, v->what, kRemedy));
  }
  return Status::Ok();
}

Status Converter::ConvertEntry(Value entry, const Path& where, int32_t device) {
  RETURN_IF_ERROR(RequireDict(entry, where));
  RETURN_IF_ERROR(Claim(entry, where, "trace entry"));
  const auto pairs = doc_->DictItems(entry);
  std::optional<std::string_view> action_name;
  uint64_t addr = 0, size = 0, stream = 0, device_free = 0;
  int64_t time_us = model::kNoTime;
  Value frames, compile_context, user_metadata, size_value, device_free_value;
  // One pass over the entry's keys: this loop runs once per trace entry (millions).
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    const auto key = doc_->AsString(pairs[i]);
    if (!key) continue;
    const Value v = pairs[i + 1];
    if (*key == "action") {
      action_name = doc_->AsString(v);
      if (!action_name) return TypeError(where, "action", v, "a str");
    } else if (*key == "addr") {
      if (!doc_->IsNone(v)) RETURN_IF_ERROR(ToU64(v, where, "addr", kAddress, &addr));
    } else if (*key == "size") {
      size_value = v;  // checked below, once the action is known
    } else if (*key == "stream") {
      if (!doc_->IsNone(v)) RETURN_IF_ERROR(ToU64(v, where, "stream", kStream, &stream));
    } else if (*key == "time_us") {
      time_us = model::kNoTime;
      if (!doc_->IsNone(v)) {
        const Kind kind = doc_->kind(v);
        if (kind != Kind::kInt && kind != Kind::kBool) {
          return TypeError(where, "time_us", v,
                           "a time in microseconds since the epoch (an integer, or None)");
        }
        // A time no 64-bit clock holds (an unsigned -1) is an unknown time, as None is.
        if (const auto t = doc_->AsInt64(v); t && *t != model::kNoTime) {
          time_us = *t;
          times_ = true;
        }
      }
    } else if (*key == "frames") {
      frames = v;
    } else if (*key == "device_free") {
      device_free_value = v;
    } else if (*key == "compile_context") {
      compile_context = v;
      compile_context_ = true;
    } else if (*key == "user_metadata") {
      user_metadata = v;
      user_metadata_ = true;
    } else if (*key == "pool_id") {
      pool_id_ = true;
    }
  }
  if (!action_name) return InvalidInput(where.ToString() + ": missing 'action'");
  const std::optional<Action> action = model::ParseAction(*action_name);
  // The memory actions' sizes are bytes the device held, and bounded; an action this vramscope
  // does not know (or a user_defined / annotate entry) keeps whatever unsigned value it has.
  const bool memory_action = action && *action <= Action::kSnapshot;
  static constexpr IntRange kAnyUnsigned{"an unsigned integer", UINT64_MAX, "2^64-1"};
  if (!doc_->IsMissing(size_value) && !doc_->IsNone(size_value)) {
    RETURN_IF_ERROR(ToU64(size_value, where, "size", memory_action ? kBytes : kAnyUnsigned, &size));
    // Only a size the file carried: an entry without one holds 0 in the model, and says nothing.
    if (action) {
      if (const auto problem = FindEntrySizeViolation(*action, size)) {
        return InvalidInput(fmt::format("{}: {}; {}", where.ToString(), *problem, kRemedy));
      }
    }
  }
  const bool has_device_free =
      !doc_->IsMissing(device_free_value) && !doc_->IsNone(device_free_value);
  if (has_device_free) {
    RETURN_IF_ERROR(ToU64(device_free_value, where, "device_free", kBytes, &device_free));
  }
  StackId stack;
  RETURN_IF_ERROR(ConvertStack(frames, Value(), where, &stack));
  model::Events& ev = trace_.events;
  if (ev.count() >= model::kMaxEvents) {
    return LimitExceeded(
        fmt::format("{}: more than {} trace events; traces this long are not "
                    "supported (record fewer with max_entries)",
                    where.ToString(), model::kMaxEvents));
  }
  const auto index = static_cast<uint32_t>(ev.count());
  ev.Push(action.value_or(Action::kOther), device, addr, size, stream, time_us, stack);
  if (!action) ev.other_action.emplace(index, trace_.strings.Intern(*action_name));
  if (action == Action::kAnnotate) annotate_action_ = true;
  if (has_device_free) ev.oom_device_free.emplace(index, device_free);
  auto keep_text = [&](Value v, std::unordered_map<uint32_t, model::StringId>& into) {
    if (doc_->IsMissing(v) || doc_->IsNone(v)) return;
    const std::string text = ScalarText(v);
    if (!text.empty()) into.emplace(index, trace_.strings.Intern(text));
  };
  keep_text(compile_context, ev.compile_context);
  keep_text(user_metadata, ev.user_metadata);
  return Status::Ok();
}

Status Converter::ConvertTraces(Value traces, const Path& where) {
  RETURN_IF_ERROR(RequireList(traces, where));
  const auto per_device = doc_->Items(traces);
  size_t total = trace_.events.count();
  for (const Value t : per_device) total += doc_->Items(t).size();
  trace_.events.Reserve(total);
  for (size_t d = 0; d < per_device.size(); ++d) {
    const Path dp = where.Index(static_cast<int64_t>(d));
    RETURN_IF_ERROR(RequireList(per_device[d], dp));
    const auto entries = doc_->Items(per_device[d]);
    // (A list whose every entry was dropped at a cut was streamed too, with nothing kept.)
    if (d < streamed_.size() &&
        (streamed_[d] > 0 || doc_->ContainerId(per_device[d]) == streamed_list_[d])) {
      // Converted while parsing; nothing may be left behind in the list.
      if (doc_->ContainerId(per_device[d]) != streamed_list_[d] || !entries.empty()) {
        return InvalidInput(dp.ToString() + ": trace entries arrived in an unexpected layout");
      }
      streamed_list_[d] = kNoList;  // found where it belongs
      continue;
    }
    // A list whose entries were consumed for another device (the same list twice) is empty now.
    if (const auto id = doc_->ContainerId(per_device[d]); id && consumed_lists_.count(*id) != 0) {
      return InvalidInput(dp.ToString() +
                          ": the same trace list appears for two devices "
                          "(corrupt pickle)");
    }
    if (!entries.empty()) RETURN_IF_ERROR(Claim(per_device[d], dp, "trace list"));
    if (!entries.empty() && !trace_.events.device.empty() &&
        trace_.events.device.back() > static_cast<int32_t>(d)) {
      unsorted_ = true;
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      const Status s =
          ConvertEntry(entries[i], dp.Index(static_cast<int64_t>(i)), static_cast<int32_t>(d));
      if (!s.ok()) {
        // At a cut, the list the cut fell in ends with the entry cut short.
        if (!doc_->IsIncomplete(per_device[d])) return s;
        cut_entries_ += entries.size() - i;
        break;
      }
    }
  }
  return Status::Ok();
}

Status Converter::ConvertSettings(Value settings) {
  // Flattened to text: nested dicts become "outer.inner" keys (roundup_power2_divisions.1024).
  const auto pairs = doc_->DictItems(settings);
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    const std::string key = ScalarText(pairs[i]);
    const Value v = pairs[i + 1];
    if (doc_->kind(v) == Kind::kDict) {
      RETURN_IF_ERROR(Claim(v, Path{nullptr, "allocator_settings", -1}, "setting"));
      const auto inner = doc_->DictItems(v);
      for (size_t k = 0; k + 1 < inner.size(); k += 2) {
        trace_.allocator_settings.emplace_back(key + "." + ScalarText(inner[k]),
                                               ScalarText(inner[k + 1]));
      }
      if (inner.empty()) trace_.allocator_settings.emplace_back(key, "{}");
    } else {
      trace_.allocator_settings.emplace_back(key, ScalarText(v));
      if (key == "trace_alloc_overflowed" && doc_->AsBool(v).value_or(false)) {
        trace_.facts.ring_buffer_overflowed = true;
      }
    }
  }
  return Status::Ok();
}

Status Converter::ConvertAnnotations(Value annotations, const Path& where) {
  RETURN_IF_ERROR(RequireList(annotations, where));
  const auto items = doc_->Items(annotations);
  for (size_t i = 0; i < items.size(); ++i) {
    const Path p = where.Index(static_cast<int64_t>(i));
    RETURN_IF_ERROR(RequireDict(items[i], p));
    RETURN_IF_ERROR(Claim(items[i], p, "annotation"));
    model::Annotation a;
    const auto pairs = doc_->DictItems(items[i]);
    for (size_t k = 0; k + 1 < pairs.size(); k += 2) {
      const std::string key = ScalarText(pairs[k]);
      if (key == "device") {
        a.device = static_cast<int32_t>(doc_->AsInt64(pairs[k + 1]).value_or(0));
      } else if (key == "time_us") {
        a.time_us = doc_->AsInt64(pairs[k + 1]).value_or(model::kNoTime);
      } else {
        a.fields.emplace_back(key, ScalarText(pairs[k + 1]));
      }
    }
    trace_.annotations.push_back(std::move(a));
  }
  return Status::Ok();
}

}  // namespace vramscope::snapshot::converter
