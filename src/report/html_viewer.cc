#include "report/html_viewer.h"

#include <fmt/format.h>

#include <cstdio>
#include <span>
#include <string_view>

#include "common/atomic_output.h"

namespace vramscope::report {

// The bundled page (cmake/BundleViewer.cmake): page.html with the stylesheet and scripts
// inlined, still holding the {{TITLE}} and <!--VRAMSCOPE_DATA--> markers.
std::span<const uint8_t> ViewerPageTemplate();

namespace {

std::string Base64(std::string_view data) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(data[i]) << 16) |
                       (static_cast<uint8_t>(data[i + 1]) << 8) | static_cast<uint8_t>(data[i + 2]);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  if (i < data.size()) {
    uint32_t v = static_cast<uint8_t>(data[i]) << 16;
    if (i + 1 < data.size()) v |= static_cast<uint8_t>(data[i + 1]) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < data.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string EscapeHtml(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

void ReplaceOnce(std::string& text, std::string_view marker, std::string_view with) {
  const size_t at = text.find(marker);
  if (at != std::string::npos) text.replace(at, marker.size(), with);
}

}  // namespace

std::string RenderHtmlViewer(const std::vector<const ViewerReport*>& reports,
                             const std::string& title) {
  const std::span<const uint8_t> page = ViewerPageTemplate();
  std::string html(reinterpret_cast<const char*>(page.data()), page.size());
  // The data first: the title is the user's text and must not be searched for markers.
  ReplaceOnce(html, "<!--VRAMSCOPE_DATA-->",
              "<script type=\"application/octet-stream\" id=\"vramscope-data\">" +
                  Base64(EncodeViewerBlob(reports)) + "</script>");
  const std::string escaped = EscapeHtml(title);
  for (size_t at = html.find("{{TITLE}}"); at != std::string::npos;
       at = html.find("{{TITLE}}", at + escaped.size())) {
    html.replace(at, 9, escaped);
  }
  return html;
}

Status WriteViewerPage(const std::vector<std::string>& databases, const std::string& target,
                       bool overwrite, const std::string& title, const Control& control) {
  ASSIGN_OR_RETURN(AtomicOutput output, AtomicOutput::Prepare(target, overwrite));
  std::vector<ViewerReport> reports;
  for (const std::string& db : databases) {
    RETURN_IF_ERROR(control.CheckCancelled("building the viewer page"));
    ASSIGN_OR_RETURN(ViewerReport r, LoadViewerReport(db));
    BuildViewerLod(r);
    reports.push_back(std::move(r));
  }
  std::vector<const ViewerReport*> pointers;
  for (const auto& r : reports) pointers.push_back(&r);
  std::string page_title = title;
  if (page_title.empty()) {
    page_title =
        reports.size() == 2 ? reports[0].title + " vs " + reports[1].title : reports[0].title;
  }
  RETURN_IF_ERROR(control.CheckCancelled("building the viewer page"));
  // Progress is counted by the caller's stage; this writes the page in chunks, stopping when
  // cancelled.
  Control writing = control;
  writing.progress = nullptr;
  const Status written = output.WriteAll(RenderHtmlViewer(pointers, page_title), writing);
  if (!written.ok()) {
    return written.code() == StatusCode::kInterrupted
               ? written
               : InvalidInput(fmt::format("{}: writing the page failed (disk full?)", target));
  }
  return output.Commit();
}

}  // namespace vramscope::report
