// The self-contained HTML viewer: the page template, stylesheet and scripts compiled into the
// binary (src/report/viewer/, bundled at build time by cmake/BundleViewer.cmake) with the
// encoded reports embedded as base64. The page needs no network access.
#pragma once

#include <string>
#include <vector>

#include "common/progress.h"
#include "common/status.h"
#include "report/viewer_data.h"

namespace vramscope::report {

// The whole page for `reports` (one, or two to compare). `title` goes in the page's <title>.
std::string RenderHtmlViewer(const std::vector<const ViewerReport*>& reports,
                             const std::string& title);

// The page of the report databases `databases` (one, or two side by side) written to `target`
// atomically; an existing target is replaced only with `overwrite`. `title` empty: the reports'
// own titles. control.cancel stops it (Interrupted), leaving nothing behind.
Status WriteViewerPage(const std::vector<std::string>& databases, const std::string& target,
                       bool overwrite, const std::string& title, const Control& control = {});

}  // namespace vramscope::report
