module @jit_body attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4, "tensor"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 4 : i64}, {name = "tensor", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<3x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"data"}]>}) -> (tensor<8xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{}, {"data"}]>] out_shardings=[<@mesh, [{}]>] manual_axes={"data", "tensor"} (%arg1: tensor<3x8xf32>) {
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %1 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<8xf32>
      %c = stablehlo.constant dense<0> : tensor<i32>
      %c_0 = stablehlo.constant dense<0> : tensor<i32>
      %2:4 = stablehlo.while(%iterArg = %arg1, %iterArg_1 = %c_0, %iterArg_2 = %c, %iterArg_3 = %1) : tensor<3x8xf32>, tensor<i32>, tensor<i32>, tensor<8xf32>
      cond {
        %c_4 = stablehlo.constant dense<3> : tensor<i32>
        %3 = stablehlo.compare LT, %iterArg_1, %c_4, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %3 : tensor<i1>
      } do {
        %3:2 = func.call @closed_call(%iterArg, %iterArg_2, %iterArg_3) : (tensor<3x8xf32>, tensor<i32>, tensor<8xf32>) -> (tensor<i32>, tensor<8xf32>)
        %c_4 = stablehlo.constant dense<1> : tensor<i32>
        %4 = stablehlo.add %iterArg_1, %c_4 : tensor<i32>
        stablehlo.return %iterArg, %4, %3#0, %3#1 : tensor<3x8xf32>, tensor<i32>, tensor<i32>, tensor<8xf32>
      }
      sdy.return %2#3 : tensor<8xf32>
    } : (tensor<3x32xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
  func.func private @closed_call(%arg0: tensor<3x8xf32>, %arg1: tensor<i32>, %arg2: tensor<8xf32>) -> (tensor<i32>, tensor<8xf32>) {
    %c = stablehlo.constant dense<1> : tensor<i32>
    %0 = stablehlo.add %arg1, %c : tensor<i32>
    %1 = stablehlo.convert %arg1 : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %2 = stablehlo.compare LT, %1, %c_0, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %c_1 = stablehlo.constant dense<3> : tensor<i32>
    %3 = stablehlo.add %1, %c_1 : tensor<i32>
    %4 = stablehlo.select %2, %3, %1 : tensor<i1>, tensor<i32>
    %c_2 = stablehlo.constant dense<0> : tensor<i32>
    %c_3 = stablehlo.constant dense<0> : tensor<i32>
    %5 = stablehlo.compare LT, %c_2, %c_3, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    %c_4 = stablehlo.constant dense<0> : tensor<i32>
    %c_5 = stablehlo.constant dense<8> : tensor<i32>
    %6 = stablehlo.add %c_4, %c_5 : tensor<i32>
    %c_6 = stablehlo.constant dense<0> : tensor<i32>
    %7 = stablehlo.select %5, %6, %c_6 : tensor<i1>, tensor<i32>
    %8 = stablehlo.dynamic_slice %arg0, %4, %7, sizes = [1, 8] : (tensor<3x8xf32>, tensor<i32>, tensor<i32>) -> tensor<1x8xf32>
    %9 = stablehlo.reshape %8 : (tensor<1x8xf32>) -> tensor<8xf32>
    %10 = "stablehlo.all_reduce"(%9) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
    ^bb0(%arg3: tensor<f32>, %arg4: tensor<f32>):
      %12 = stablehlo.add %arg3, %arg4 : tensor<f32>
      stablehlo.return %12 : tensor<f32>
    }) : (tensor<8xf32>) -> tensor<8xf32>
    %11 = stablehlo.add %arg2, %10 : tensor<8xf32>
    return %0, %11 : tensor<i32>, tensor<8xf32>
  }
}
