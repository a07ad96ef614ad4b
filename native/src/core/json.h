// Minimal JSON reader for config.json and safetensors headers. Only what those files need:
// objects, arrays, strings (with escapes), numbers, booleans, null. Parse errors throw
// NativeError(config_invalid) naming the byte offset.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

class Json {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  static Json parse(const std::string& text, const std::string& source_name);

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_object() const { return type_ == Type::kObject; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_bool() const { return type_ == Type::kBool; }

  bool as_bool() const { return bool_; }
  double as_number() const { return number_; }
  const std::string& as_string() const { return string_; }
  const std::vector<Json>& items() const { return array_; }
  const std::vector<std::pair<std::string, Json>>& members() const { return object_; }

  /** Member lookup on an object; nullptr when absent or when this is not an object. */
  const Json* find(const std::string& key) const;

 private:
  friend class JsonParser;
  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::vector<Json> array_;
  std::vector<std::pair<std::string, Json>> object_;
};

}  // namespace tandem
