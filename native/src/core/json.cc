#include "json.h"

#include <cstdlib>
#include <cstring>

#include "error.h"

namespace tandem {

class JsonParser {
 public:
  JsonParser(const std::string& text, const std::string& source) : s_(text), source_(source) {}

  Json parse_document() {
    Json value = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("trailing characters");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  [[noreturn]] void fail(const char* what) {
    throw NativeError(ErrorCode::kConfigInvalid, source_ + ": invalid JSON (" + what +
                                                     " at byte " + std::to_string(pos_) + ")");
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' ||
                                s_[pos_] == '\t')) {
      ++pos_;
    }
  }

  bool consume(const char* word) {
    size_t n = std::strlen(word);
    if (s_.compare(pos_, n, word) == 0) {
      pos_ += n;
      return true;
    }
    return false;
  }

  Json parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting too deep");
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end");
    Json out;
    char c = s_[pos_];
    if (c == '{') {
      out.type_ = Json::Type::kObject;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return out;
      }
      for (;;) {
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected key");
        std::string key = parse_string();
        skip_ws();
        if (pos_ >= s_.size() || s_[pos_] != ':') fail("expected ':'");
        ++pos_;
        out.object_.emplace_back(std::move(key), parse_value(depth + 1));
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == '}') {
          ++pos_;
          return out;
        }
        fail("expected ',' or '}'");
      }
    }
    if (c == '[') {
      out.type_ = Json::Type::kArray;
      ++pos_;
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return out;
      }
      for (;;) {
        out.array_.push_back(parse_value(depth + 1));
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < s_.size() && s_[pos_] == ']') {
          ++pos_;
          return out;
        }
        fail("expected ',' or ']'");
      }
    }
    if (c == '"') {
      out.type_ = Json::Type::kString;
      out.string_ = parse_string();
      return out;
    }
    if (consume("true")) {
      out.type_ = Json::Type::kBool;
      out.bool_ = true;
      return out;
    }
    if (consume("false")) {
      out.type_ = Json::Type::kBool;
      return out;
    }
    if (consume("null")) return out;
    // Python's json.dump writes these for non-finite floats; accept them.
    if (consume("NaN")) return number(__builtin_nan(""));
    if (consume("Infinity")) return number(__builtin_inf());
    if (consume("-Infinity")) return number(-__builtin_inf());
    if (c == '-' || (c >= '0' && c <= '9')) {
      const char* begin = s_.c_str() + pos_;
      char* end = nullptr;
      double v = std::strtod(begin, &end);
      if (end == begin) fail("bad number");
      pos_ += static_cast<size_t>(end - begin);
      return number(v);
    }
    fail("unexpected character");
  }

  static Json number(double v) {
    Json out;
    out.type_ = Json::Type::kNumber;
    out.number_ = v;
    return out;
  }

  void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t parse_hex4() {
    if (pos_ + 4 > s_.size()) fail("bad \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<uint32_t>(h - 'A' + 10);
      else fail("bad \\u escape");
    }
    return v;
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    while (pos_ < s_.size()) {
      char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = parse_hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && pos_ + 1 < s_.size() && s_[pos_] == '\\' &&
              s_[pos_ + 1] == 'u') {
            pos_ += 2;
            uint32_t lo = parse_hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
    fail("unterminated string");
  }

  const std::string& s_;
  const std::string& source_;
  size_t pos_ = 0;
};

Json Json::parse(const std::string& text, const std::string& source_name) {
  return JsonParser(text, source_name).parse_document();
}

const Json* Json::find(const std::string& key) const {
  if (type_ != Type::kObject) return nullptr;
  for (const auto& m : object_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

}  // namespace tandem
