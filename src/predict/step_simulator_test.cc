#include "predict/step_simulator.h"

#include <gtest/gtest.h>
TEST(StepSimulator, Placeholder) {}
