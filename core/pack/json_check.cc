// json_check.cc: json_check_fast() on simdjson (the C core's only C++, kept to this file).
#include "json_check.h"

#include <cstring>
#include <new>
#include <vector>

#include <simdjson.h>

int json_check_fast(const uint8_t *text, size_t len)
{
	// simdjson reads up to SIMDJSON_PADDING bytes past the end: parse a padded copy.
	thread_local simdjson::dom::parser parser;
	thread_local std::vector<char> padded;

	try {
		if (padded.size() < len + simdjson::SIMDJSON_PADDING)
			padded.resize(len + simdjson::SIMDJSON_PADDING);
		if (len)
			std::memcpy(padded.data(), text, len);
		simdjson::dom::element doc;
		return parser.parse(padded.data(), len, false).get(doc) == simdjson::SUCCESS;
	} catch (...) {
		return 0; // out of memory, or any other surprise: let jansson decide
	}
}
