package wire

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Lease is a coordination.k8s.io/v1 Lease, the kind nodehub writes itself (the node's lease),
// with its own protobuf codec: the generated k8s.io/api package would cost the appliance's binary
// more than this file. Its JSON and protobuf forms are the apiserver's.
type Lease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              LeaseSpec `json:"spec,omitempty"`
}

// LeaseSpec is coordination.k8s.io/v1 LeaseSpec.
type LeaseSpec struct {
	HolderIdentity       *string           `json:"holderIdentity,omitempty"`
	LeaseDurationSeconds *int32            `json:"leaseDurationSeconds,omitempty"`
	AcquireTime          *metav1.MicroTime `json:"acquireTime,omitempty"`
	RenewTime            *metav1.MicroTime `json:"renewTime,omitempty"`
	LeaseTransitions     *int32            `json:"leaseTransitions,omitempty"`
	Strategy             *string           `json:"strategy,omitempty"`
	PreferredHolder      *string           `json:"preferredHolder,omitempty"`
}

// Marshal encodes the lease as the generated code does: metadata=1, spec=2, and in the spec the
// fields that are set, by number.
func (l *Lease) Marshal() ([]byte, error) {
	meta, err := l.ObjectMeta.Marshal()
	if err != nil {
		return nil, err
	}
	var spec []byte
	s := &l.Spec
	if s.HolderIdentity != nil {
		spec = appendBytesField(spec, 1, []byte(*s.HolderIdentity))
	}
	if s.LeaseDurationSeconds != nil {
		spec = appendVarintField(spec, 2, uint64(int64(*s.LeaseDurationSeconds)))
	}
	for _, f := range []struct {
		num int
		t   *metav1.MicroTime
	}{{3, s.AcquireTime}, {4, s.RenewTime}} {
		if f.t != nil {
			b, err := f.t.Marshal()
			if err != nil {
				return nil, err
			}
			spec = appendBytesField(spec, f.num, b)
		}
	}
	if s.LeaseTransitions != nil {
		spec = appendVarintField(spec, 5, uint64(int64(*s.LeaseTransitions)))
	}
	if s.Strategy != nil {
		spec = appendBytesField(spec, 6, []byte(*s.Strategy))
	}
	if s.PreferredHolder != nil {
		spec = appendBytesField(spec, 7, []byte(*s.PreferredHolder))
	}
	out := appendBytesField(nil, 1, meta)
	return appendBytesField(out, 2, spec), nil
}

// Unmarshal decodes the protobuf form.
func (l *Lease) Unmarshal(b []byte) error {
	*l = Lease{TypeMeta: l.TypeMeta}
	var err error
	perr := protoFields(b, func(f field) bool {
		switch {
		case f.num == 1 && f.typ == wireBytes:
			err = l.ObjectMeta.Unmarshal(f.data)
		case f.num == 2 && f.typ == wireBytes:
			err = l.Spec.unmarshal(f.data)
		}
		return err == nil
	})
	if perr != nil {
		return perr
	}
	return err
}

func (s *LeaseSpec) unmarshal(b []byte) error {
	var err error
	perr := protoFields(b, func(f field) bool {
		switch f.num {
		case 1, 6, 7:
			if f.typ != wireBytes {
				err = fmt.Errorf("wire: lease spec field %d", f.num)
				return false
			}
			v := string(f.data)
			switch f.num {
			case 1:
				s.HolderIdentity = &v
			case 6:
				s.Strategy = &v
			default:
				s.PreferredHolder = &v
			}
		case 2, 5:
			v := int32(f.val)
			if f.num == 2 {
				s.LeaseDurationSeconds = &v
			} else {
				s.LeaseTransitions = &v
			}
		case 3, 4:
			t := &metav1.MicroTime{}
			if err = t.Unmarshal(f.data); err != nil {
				return false
			}
			if f.num == 3 {
				s.AcquireTime = t
			} else {
				s.RenewTime = t
			}
		}
		return true
	})
	if perr != nil {
		return perr
	}
	return err
}

// DeepCopy returns a copy that shares nothing with l.
func (l *Lease) DeepCopy() *Lease {
	c := &Lease{TypeMeta: l.TypeMeta, ObjectMeta: *l.ObjectMeta.DeepCopy(), Spec: l.Spec.DeepCopy()}
	return c
}

// DeepCopy returns a copy of the spec that shares nothing with s.
func (s LeaseSpec) DeepCopy() LeaseSpec {
	str := func(p *string) *string {
		if p == nil {
			return nil
		}
		v := *p
		return &v
	}
	i32 := func(p *int32) *int32 {
		if p == nil {
			return nil
		}
		v := *p
		return &v
	}
	t := func(p *metav1.MicroTime) *metav1.MicroTime {
		if p == nil {
			return nil
		}
		v := *p
		return &v
	}
	return LeaseSpec{HolderIdentity: str(s.HolderIdentity), LeaseDurationSeconds: i32(s.LeaseDurationSeconds), AcquireTime: t(s.AcquireTime),
		RenewTime: t(s.RenewTime), LeaseTransitions: i32(s.LeaseTransitions), Strategy: str(s.Strategy), PreferredHolder: str(s.PreferredHolder)}
}

func appendVarintField(b []byte, num int, v uint64) []byte {
	b = appendVarint(b, uint64(num)<<3|wireVarint)
	return appendVarint(b, v)
}
