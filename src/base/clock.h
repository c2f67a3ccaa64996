// Clocks the engine can run on: the steady clock of a real run, or a virtual clock that a
// simulated executor advances by the modelled cost of each step (`sluice sim`).
#pragma once

namespace sluice {

// Seconds since some fixed start.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double now() const = 0;
};

// Time that moves only when told to. Not thread-safe (one simulation thread owns it).
class VirtualClock final : public Clock {
 public:
  double now() const override { return t_; }
  void set(double t) { t_ = t; }
  void advance(double seconds) { t_ += seconds; }

 private:
  double t_ = 0;
};

}  // namespace sluice
