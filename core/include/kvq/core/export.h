#pragma once
// Symbol visibility. kvq builds with -fvisibility=hidden: a class or function that crosses a
// shared-library boundary says so here. Interfaces that plugins implement are BOOST_SYMBOL_VISIBLE
// so their typeinfo/vtables are shared between the host and every plugin.
#include <boost/config.hpp>

#define KVQ_API BOOST_SYMBOL_VISIBLE
