#include <gtest/gtest.h>

#include "predict/step_simulator.h"
TEST(Predict, Placeholder) {}
